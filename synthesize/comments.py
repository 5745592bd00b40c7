"""Comments that no longer say what the values do: `threadwise validate`'s review warnings.

Problem: a profile's comments are derived from its values (writer.py): the
treatment line above each group, its sizing arithmetic, the overrides with
the preset value each one replaces; a trained profile's header states the
verdict its training record measured. A hand edit changes a value and leaves
the comment: `treatment = "batch"` under "# latency: preempts other layers",
or a header saying "beat the default scheduler" above a profile that was never
measured. The reviewer reads the comment.

Approach: for each group, the comment lines of the kinds the writer derives
(treatment, sizing, overrides, the AvgRuntime split, the uid) are read from the file
and compared with the lines the writer would write for its values now
(`writer.group_comments`); a derived line the values no longer give is a
warning at its line, naming the line they give. Free-text comments are left
alone. The header's verdict is checked against the training record by refine
(a `RecordNote`, handed in by the CLI shell): a verdict about another profile
is a warning at the verdict's line.
"""

from __future__ import annotations

import re
from pathlib import Path

from threadwise.diagnostics import Diagnostic
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.provenance import NOT_THE_HEADERS, Header, RecordNote, read_header
from threadwise.synthesize.schema import OPTION_KEYS, Profile, Treatment
from threadwise.synthesize.writer import group_comments
from threadwise.words import plain

# The comment kinds writer.py derives from a group's values, by their first words (an override's
# line is of its key's own kind, so it is compared with the line for the same key).
_KINDS = {
    "treatment": re.compile(rf"^({'|'.join(t.value for t in Treatment)}): "),
    "sizing": re.compile(r"^sizing: "),
    "shared cores": re.compile(r"^  \d+ hot threads share "),
    "overrides": re.compile(r"^overrides of the "),
    **{f"override {key}": re.compile(rf"^  {key} \S+ -> \S+$") for key in OPTION_KEYS},
    "runtime": re.compile(r"^  threads whose average runtime "),
    "uid": re.compile(r"^  only threads running as uid "),
}
_HEADER_LINE = re.compile(r"^\[\[?[^\]]+\]\]?\s*(#.*)?$")
STALE_HINT = ("comments are derived from the values: write what the values give (above), or let "
              "threadwise write the file again (synthesize, train)")


def _kind(comment: str) -> str | None:
    return next((kind for kind, pattern in _KINDS.items() if pattern.match(comment)), None)


def _body(lines: list[str], header: int) -> list[tuple[int, str]]:
    """(line number, comment text) of the comments in a [[group]] table's own body."""
    out = []
    for number in range(header + 1, len(lines) + 1):
        line = lines[number - 1]
        if _HEADER_LINE.match(line):
            break
        if line.startswith("#"):
            text = line[1:]
            out.append((number, text[1:] if text.startswith(" ") else text))
    return out


def stale_comments(profile: Profile, text: str, file: str) -> list[Diagnostic]:
    """A warning for each derived comment of a group that its values no longer give."""
    lines, where = text.splitlines(), SourceMap(text)
    found = []
    for i, group in enumerate(profile.groups):
        header = where.line_of(("group", i))
        if header is None:
            continue
        expected = group_comments(group)
        for number, comment in _body(lines, header):
            kind = _kind(comment)
            if kind is None or comment in expected:
                continue
            now = next((line for line in expected if _kind(line) == kind), None)
            says = f"; its values give `{now.strip()}`" if now else "; its values give no such line"
            found.append(Diagnostic(
                "stale_comment", f"group {group.name!r}: the comment `{comment.strip()}` no longer matches "
                f"its values{says}", STALE_HINT, severity="warning", path=("group", i), file=file,
                line=number))
    return found


def stale_verdict(header: Header | None, note: RecordNote | None, file: str) -> list[Diagnostic]:
    """A warning when the header's verdict is about another profile than this one."""
    if header is None or note is None or note.applies is not False:
        return []
    verdict = header.verdict if len(header.verdict) <= 90 else header.verdict[:87] + "..."
    why = plain(note.sentence).removesuffix(f"; {NOT_THE_HEADERS}").removesuffix(f", so {NOT_THE_HEADERS}")
    return [Diagnostic("stale_verdict", f"{NOT_THE_HEADERS} (\"{verdict}\"): {why}",
                       "measure this profile (threadwise ladder or train) before its header claims a result, "
                       "or drop the header", severity="warning", file=file, line=header.line)]


def review_warnings(path: Path, profile: Profile, text: str, note: RecordNote | None) -> list[Diagnostic]:
    """validate's warnings beyond the rules: stale comments, a header verdict about another profile."""
    return [*stale_comments(profile, text, str(path)), *stale_verdict(read_header(text), note, str(path))]
