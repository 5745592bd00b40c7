"""Where a profile's evidence is: the training record its header names, the capture `[source]` names.

Problem: a trained profile carries two pointers to its evidence. Its header
(refine/outcome.py `profile_header`) names the training record, `# Evidence:
artifacts/NAME/REPORT.md (data: artifacts/NAME/ladder.duckdb).`, relative to
the repository the training ran in, followed by the record's verdict; its
`[source]` table names the capture, relative to the profile's own folder. A
reviewer's copy of the profile (a base branch's file in /tmp, a notebook run
from notebooks/) sits elsewhere, so neither path is right from where the copy
is read; looking in one place and giving up loses the evidence.

Approach: a named path is looked up, in order, as written from the profile's
folder (how synthesize and train write `[source]`), from each place that may
be the repository root (the caller's roots, e.g. the working directory or
the notebook's `..`, then every folder above the profile), also with the
leading `../` a profile in `profiles/` needs removed, and for a capture in
train's work directory `build/train/NAME/`. The first file found wins; the
places tried are kept for the error. The header's verdict and where it is
come back as a `Header`; what the record says about a profile is a
`RecordNote`, made by refine (which owns the ladder file) and handed to the
review commands by the CLI shell.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from threadwise.errors import InputError
from threadwise.words import Lit, Words

if TYPE_CHECKING:
    from threadwise.synthesize.schema import Profile

# How a note ends when the profile is not the one the header's verdict is about.
NOT_THE_HEADERS = "the header's verdict does not apply to this profile"
# outcome.profile_header's evidence line: the record's REPORT.md and its ladder file.
_EVIDENCE = re.compile(r"^# Evidence: .*\(data: (?P<data>.+)\)\.\s*$")


@dataclass(frozen=True)
class Header:
    """A trained profile's header: the ladder file it names and the verdict it states."""

    record: str            # the ladder file, as the header names it
    verdict: str           # the verdict sentence(s), comment markers removed
    line: int              # 1-based line of the verdict's first line


@dataclass(frozen=True)
class RecordNote:
    """What a profile's training record says about it (made by refine.evidence).

    `applies`: True when the profile is the one the header's verdict is about, False when it is
    not (edited since, or another arm), None when the record could not be read.
    """

    record: str
    sentence: Words
    applies: bool | None


RecordCheck = Callable[[Path, "Profile"], RecordNote | None]


# Atop a trained candidate that did not beat the default scheduler (refine/outcome.py); `apply`
# refuses a file that carries it unless --force.
KEEP_DEFAULT_MARK = "# threadwise-verdict: keep-default"


def says_keep_default(text: str) -> bool:
    """Whether a profile's header (its comment lines above the first key) carries the keep-default mark."""
    for line in text.splitlines():
        if not line.startswith("#"):
            return False
        if line.strip() == KEEP_DEFAULT_MARK:
            return True
    return False


def read_header(text: str) -> Header | None:
    """The header of a trained profile's text, or None (an untrained profile has none)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            return None    # the header sits above the first key
        found = _EVIDENCE.match(line)
        if found:
            verdict = []
            for more in lines[i + 1:]:
                if not more.startswith("#"):
                    break
                verdict.append(more.removeprefix("#").strip())
            return Header(found.group("data"), " ".join(verdict), i + 2)
    return None


def _above(path: Path) -> list[Path]:
    return list(path.resolve().parent.parents) if path.parent != path else []


def _unique(paths: Iterable[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


def _strip_up(named: Path) -> Path:
    """`named` without its leading `..` parts (how a profile in profiles/ reaches the root)."""
    parts = list(named.parts)
    while parts and parts[0] == "..":
        parts.pop(0)
    return Path(*parts) if parts else named


def locate(named: str, profile_path: Path, roots: Sequence[Path], *,
           extra: Sequence[Path] = ()) -> tuple[Path | None, list[Path]]:
    """The file a profile names (see the module note), and every place tried."""
    path = Path(named)
    if path.is_absolute():
        return (path if path.is_file() else None), [path]
    bases = _unique([*roots, profile_path.resolve().parent, *_above(profile_path)])
    tried = _unique([profile_path.parent / path, *(base / path for base in bases),
                     *(base / _strip_up(path) for base in bases), *extra])
    return next((p for p in tried if p.is_file()), None), tried


def source_capture(profile: Profile, profile_path: Path, roots: Sequence[Path]) -> Path:
    """The capture the profile's `[source]` names, found as `locate` says (or in train's work
    directory build/train/NAME of a root), or an InputError listing where it looked."""
    named = profile.source.capture if profile.source is not None else None
    if not named:
        raise InputError(f"{profile_path} names no capture in [source]",
                         hint="give the capture it was trained on (e.g. THREADWISE_CAPTURE or --capture)")
    work = [root / "build" / "train" / profile.name / Path(named).name for root in roots]
    found, tried = locate(named, profile_path, roots, extra=work)
    if found is None:
        raise InputError(f"{profile_path} names the capture {named!r} in [source], which is at none of "
                         + ", ".join(dict.fromkeys(str(p.resolve()) for p in tried)),
                         hint="build/ is not committed: train the profile here, or give its capture "
                              "(THREADWISE_CAPTURE, --capture)")
    return found


def record_sentence_missing(named: str, tried: Sequence[Path]) -> Words:
    """The note for a header whose record is not where it says."""
    return ("the header names the record ", Lit(named), ", which is at none of ",
            ", ".join(str(p) for p in tried[:4]), ": its verdict cannot be checked here")
