"""Is the profile under review the one its training record measured? (`validate`, `diff`)

Problem: a trained profile's header says what its record measured ("beat the
default scheduler") and keeps saying it after any edit. The record's ladder
file holds every profile arm exactly as measured (`arm.profile_toml`), so the
question a reviewer asks, "was this profile measured, and with what result?",
has an answer in the data.

Approach: the header names the ladder file (synthesize.provenance finds it
from the profile, as it finds `[source]`'s capture). Each profile arm of the
file is parsed and compared with the profile for scheduling
(synthesize.diff.scheduling_changes: names, comments and evidence do not
count). The record's final profile is the arm REPORT.md's verdict is about
(report.best_measurement). The note names the arm the profile is identical to
(the final one when it is), with that arm's verdicts against the default
scheduler as the judge stored them, or says it was not measured, naming the
closest arm and what differs. The header's verdict applies only when the
profile is the final one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from threadwise.errors import ThreadwiseError
from threadwise.sqlfiles import statement
from threadwise.synthesize.api import (
    NOT_THE_HEADERS,
    RecordNote,
    locate,
    read_header,
    record_sentence_missing,
)
from threadwise.words import Lit, Words

if TYPE_CHECKING:
    import duckdb

    from threadwise.synthesize.api import Profile

BASELINE = "baseline"   # the default scheduler's arm (refine.plan.BASELINE)


def _sql(name: str) -> str:
    return statement("threadwise.refine", "sql/evidence.sql", name)


@dataclass(frozen=True)
class MeasuredArm:
    run_id: int
    arm: str
    purpose: str
    changes: tuple[str, ...]      # what differs from the profile under review (empty: identical)

    def words(self) -> Words:
        return (Lit(self.arm), f" of run {self.run_id} ({self.purpose})")


def record_note(profile_path: Path, profile: Profile, *, roots: Sequence[Path] = ()) -> RecordNote | None:
    """What the record named in the profile's header says about it; None: no header names one."""
    # deferred: the profile's text is read again only here (the CLI imports this module at startup)
    from threadwise.synthesize.api import read_text

    header = read_header(read_text(profile_path))
    if header is None:
        return None
    found, tried = locate(header.record, profile_path, roots or (Path(),))   # Path(): the working directory
    if found is None:
        return RecordNote(header.record, record_sentence_missing(header.record, tried), None)
    # deferred: duckdb and the ladder store are loaded only when a record is read
    from threadwise.refine.measure import store

    try:
        con = store.open_ladder(found, read_only=True)
    except ThreadwiseError as error:   # e.g. an older schema: review goes on, without the record
        why = error.message.removeprefix(f"{found}: ") + (f" ({error.hint})" if error.hint else "")
        return RecordNote(str(found), ("the record ", Lit(str(found)), f" cannot be read here: {why}"), None)
    try:
        return _note(con, str(found), profile)
    finally:
        con.close()


def _arms(con: duckdb.DuckDBPyConnection, record: str, profile: Profile) -> list[MeasuredArm]:
    """Every profile arm of the record, with what differs from `profile`."""
    # deferred: pydantic (the profile schema) and the diff load only when a record is read
    from threadwise.diagnostics import ProfileError
    from threadwise.synthesize.api import parse_profile, scheduling_changes

    out = []
    for run_id, arm, purpose, text in con.execute(_sql("profile_arms")).fetchall():
        try:
            measured, _ = parse_profile(text, f"{record}: run {run_id} arm {arm}")
        except ProfileError:
            continue    # a profile of an older schema: not comparable
        out.append(MeasuredArm(int(run_id), arm, purpose, tuple(scheduling_changes(measured, profile))))
    return out


def _verdicts(con: duckdb.DuckDBPyConnection, arm: MeasuredArm) -> Words:
    """The arm's stored verdicts against the default scheduler, per metric (primary first)."""
    # deferred: the ladder store loads duckdb
    from threadwise.refine.measure.store import run_info

    info = run_info(con, arm.run_id)
    order = [info.primary[0], *(m for m, _ in info.secondary)]
    rows = con.execute(_sql("arm_verdicts"), [arm.run_id, BASELINE, arm.arm]).fetchall()
    by_metric: dict[str, dict[str, list[int]]] = {}
    for metric, level, verdict in rows:
        by_metric.setdefault(metric, {}).setdefault(verdict, []).append(int(level))
    out: list[str] = []
    for metric in sorted(by_metric, key=lambda m: (m not in order, order.index(m) if m in order else 0, m)):
        out += ["; " * bool(out), Lit(metric), " "]
        out.append(", ".join(f"{verdict.replace('_', ' ')} at bg {', '.join(map(str, levels))}"
                             for verdict, levels in by_metric[metric].items()))
    return tuple(out) or ("no stored verdicts against the default scheduler",)


def _note(con: duckdb.DuckDBPyConnection, record: str, profile: Profile) -> RecordNote:
    # deferred: the report module loads duckdb and the judge
    from threadwise.refine.report import best_measurement

    arms = _arms(con, record, profile)
    final = best_measurement(con)
    same = [a for a in arms if not a.changes]
    at = ("in ", Lit(record))
    if not same:
        closest = min(arms, key=lambda a: len(a.changes), default=None)
        near: Words = () if closest is None else (
            " (closest: ", *closest.words(), ", which differs in ", "; ".join(closest.changes[:3]),
            ", ..." if len(closest.changes) > 3 else "", ")")
        return RecordNote(record, ("not measured: it differs from every profile arm ", *at, *near, "; ",
                                   NOT_THE_HEADERS), False)
    match = next((a for a in same if final is not None and (a.run_id, a.arm) == final), same[-1])
    is_final = final is not None and (match.run_id, match.arm) == final
    sentence: Words = ("identical to ", *match.words(), " ", *at,
                       ", the record's final profile" if is_final else "",
                       "; its stored verdicts against the default scheduler: ", *_verdicts(con, match))
    if not is_final:
        sentence += ("; not the record's final profile, so ", NOT_THE_HEADERS)
    return RecordNote(record, sentence, is_final)
