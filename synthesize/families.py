"""Known runtime families: what a thread's name says about it when the capture says little.

Problem: a capture of a few seconds often catches a JVM's GC threads or Redis's
`bio_*` threads idle, so analysis gives them no role (or a low-confidence one),
and the profile treats them as default. Their names are well known, though:
`GC Thread#N` is garbage collection, `io_thd_N` handles requests.

Approach: the families are data (`data/families-<schema>.toml`, versioned,
with the source of every name), read strictly (unknown keys, an unknown
treatment or a pattern scx_layered cannot match are errors with file:line).
`family_of(names)` finds the family whose prefixes take every observed name
of a group. `decide` combines a family with the measured treatment: when the
evidence is thin (no role, or confidence below the builder's cutoff) the
family's treatment applies, otherwise the measurement does; either way the
note says which decided. A measured exclusive group is never overridden.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from threadwise.diagnostics import Diagnostic, ProfileError, dotted_location, syntax_diagnostic
from threadwise.errors import UsageError
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.patterns import check_pattern, comm_matches, prefix_of
from threadwise.synthesize.schema import Group, Role, Treatment

FAMILIES_SCHEMA = 1
MIN_CONFIDENCE = 0.5   # below this a role is thin evidence (build.py's cutoff too)
BUNDLED = f"families-{FAMILIES_SCHEMA}.toml"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Family(_Model):
    """Threads of one runtime with one role, named by comm prefixes."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    runtime: str
    match: Annotated[list[str], Field(min_length=1)]
    treatment: Annotated[Treatment, Field(strict=False)]
    why: str
    sources: Annotated[list[str], Field(min_length=1)]
    observed: bool = False

    def takes(self, comm: str) -> bool:
        return any(comm_matches(prefix_of(p), comm) for p in self.match)


class Families(_Model):
    """The whole data file."""

    schema_version: Literal[1]
    version: str
    families: list[Family] = Field(alias="family")

    def family_of(self, names: list[str]) -> Family | None:
        """The first family that takes every one of `names` (None for no names)."""
        if not names:
            return None
        return next((f for f in self.families if all(f.takes(n) for n in names)), None)


@dataclass(frozen=True)
class Decision:
    """The treatment after consulting a family, and the note that says who decided."""

    treatment: Treatment
    note: str | None


def decide(family: Family | None, measured: Treatment, *, thin: str | None) -> Decision:
    """Family default when the evidence is `thin` (the reason), else the measurement."""
    if family is None:
        return Decision(measured, None)
    label = f"family {family.name} ({family.runtime}: {family.why})"
    if measured is Treatment.EXCLUSIVE or thin is None:
        if family.treatment is measured:
            return Decision(measured, f"{label}: {measured.value}, as measured")
        return Decision(measured, f"{label} suggests {family.treatment.value}; the measured "
                                  f"evidence decided {measured.value}")
    if family.treatment is measured:
        return Decision(measured, f"{label}: {measured.value}; the evidence is thin ({thin})")
    return Decision(family.treatment, f"{label}: {family.treatment.value}, the family decided: "
                                      f"the evidence is thin ({thin})")


def family_decided(group: Group) -> bool:
    """Whether a group's treatment came from its family (thin evidence), not a measurement."""
    ev = group.evidence
    if group.family is None or ev is None or group.treatment is Treatment.DEFAULT:
        return False
    return ev.role in (None, Role.DEFAULT) or (ev.confidence or 0.0) < MIN_CONFIDENCE


def parse_families(text: str, file: str) -> Families:
    """Families from TOML text, or ProfileError with each problem at its line."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as bad:
        raise ProfileError(file, [syntax_diagnostic(str(bad), text, file)]) from None
    source = SourceMap(text)
    try:
        families = Families.model_validate(raw)
    except pydantic.ValidationError as bad:
        problems = []
        for err in bad.errors():
            loc = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
            message = (f"unknown key {dotted_location(loc)!r}" if err["type"] == "extra_forbidden"
                       else f"{dotted_location(loc)}: {err['msg']}")
            problems.append(Diagnostic("families", message, file=file, path=loc,
                                       line=source.line_of(loc) or 1,
                                       hint="see the header of synthesize/data/families-1.toml; "
                                            "treatments: " + ", ".join(t.value for t in Treatment)))
        raise ProfileError(file, problems) from None
    problems = []
    for i, family in enumerate(families.families):
        for k, pattern in enumerate(family.match):
            found = check_pattern(pattern)
            if found:
                loc = ("family", i, "match", k)
                problems.append(Diagnostic(found.rule, f"family {family.name!r}: {found.message}",
                                           found.hint, file=file, path=loc,
                                           line=source.line_of(loc) or 1))
    if problems:
        raise ProfileError(file, problems)
    return families


def load_families(path: str | Path | None = None) -> Families:
    """A families file (default: the bundled one)."""
    if path is None:
        return bundled()
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{file}: no such families file",
                         hint="pass a TOML file shaped like synthesize/data/families-1.toml")
    return parse_families(file.read_text(encoding="utf-8"), str(file))


@cache
def bundled() -> Families:
    """The families shipped with threadwise."""
    text = resources.files("threadwise.synthesize").joinpath("data", BUNDLED).read_text("utf-8")
    return parse_families(text, f"synthesize/data/{BUNDLED}")
