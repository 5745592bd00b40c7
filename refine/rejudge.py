"""`threadwise rejudge`: judge a stored ladder file again with the current judge.

Problem: a training record is committed data; when the judge changes (schema 1's
unpaired bootstrap and single noise margin became schema 2's paired ratios and
per-metric A/A floors, then schema 5's noise from the same run and level), the
record's tables, decisions and verdict must be recomputed from its measurements,
never left describing another rule, and never re-typed by hand.

Approach: open the file writable (store.open_ladder migrates it), judge every pair
of arms the file had judged (plus best -> candidate of each refine step) with the
noise of the run's own A/A arm (judge.judge; a run without one, as every run
recorded before schema 5, is judged on its pairs' own residuals: no other run's
noise is borrowed), store each run's A/A floors, then re-decide each refine step
by the keep rule from those stored comparisons. A step whose decision changes says so in its
reason: later steps were measured against the best the old rule kept, and the
data cannot say what they would have been against another. A record written
before schema 2 has no `training` row; it is taken once from the old REPORT.md
beside the file (profile path, command, wall time, limitations). Then REPORT.md,
its plots and the profile's header are written again from the file.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from threadwise.errors import InputError
from threadwise.refine import outcome, report
from threadwise.refine.measure import judge, stats, store
from threadwise.refine.measure.ladder import AA_ARM, BASELINE
from threadwise.refine.measure.store import sql
from threadwise.refine.measure.validity import SPINNER_ALIVE_CPUS
from threadwise.refine.search.loop import BEST, CANDIDATE, START
from threadwise.synthesize.api import says_keep_default


@dataclass(frozen=True)
class Rejudged:
    runs: int
    revalidated: int  # profile cells valid by today's rule that schema 1 had dropped
    changed: list[str]  # steps whose decision the current rule changed
    verdict: str | None  # the training's headline; None for a bare ladder (no training steps)


def revalidate(con: duckdb.DuckDBPyConnection) -> int:
    """Profile cells that only failed schema 1's spinner floor, judged by today's rule.

    Schema 1 held profile cells to the baseline's background floor, so a background the
    profile starved made the cell invalid; today that is a result (validity.py) and only
    a background that never ran is invalid. Decided from the stored cell row alone."""
    rows = con.execute(sql("spinner_only_invalid")).fetchall()
    freed = [(run_id, idx) for run_id, idx, spinner_s, wall_s in rows
             if spinner_s is not None and wall_s and spinner_s >= SPINNER_ALIVE_CPUS * wall_s]
    for run_id, idx in freed:
        con.execute(sql("make_valid"), [run_id, idx])
    return len(freed)


def rejudge_file(con: duckdb.DuckDBPyConnection) -> Rejudged:
    """Validity by today's rule, then floors, comparisons and step decisions, judged again."""
    revalidated = revalidate(con)
    runs = [r[0] for r in con.execute(sql("run_ids")).fetchall()]
    judged: dict[tuple[int, str, str], stats.LadderComparison] = {}

    def comparison(run_id: int, reference: str, candidate: str) -> stats.LadderComparison:
        """The pair judged (and stored) once, with the run's own A/A noise."""
        key = (run_id, reference, candidate)
        if key not in judged:
            judged[key] = judge.judge(con, run_id, reference, candidate)
        return judged[key]

    for run_id in runs:
        judge.store_floors(con, run_id)
        pairs = {tuple(p) for p in con.execute(sql("judged_pairs"), [run_id]).fetchall()}
        arms = {r[0] for r in con.execute(sql("run_arms"), [run_id]).fetchall()}
        if {BEST, CANDIDATE} <= arms:
            pairs.add((BEST, CANDIDATE))
        if {BASELINE, AA_ARM} <= arms:
            pairs.add((BASELINE, AA_ARM))  # the A/A arm judged as a candidate: a check a reader sees
        for reference, candidate in sorted(pairs):
            comparison(run_id, reference, candidate)
    changed = []
    steps = con.execute(sql("step_rows")).fetchall()
    for step, run_id, candidate, decision, _reason in steps:
        if run_id is None:
            continue  # rejected before measuring: nothing to judge
        if step == 0:
            new, reason = "kept", (f"the start profile is the first best (step 0 keeps it by definition); "
                                   f"against the baseline it {comparison(run_id, BASELINE, START).reason}")
        else:
            vs_best = comparison(run_id, BEST, CANDIDATE)
            vs_base = comparison(run_id, BASELINE, CANDIDATE)
            kept, why = stats.keep_decision(vs_best, comparison(run_id, BASELINE, BEST), vs_base)
            new = "kept" if kept else "reverted"
            reason = f"{new} against the best ({why}); against the baseline it {vs_base.reason}"
        if new != decision:
            reason += (f" [re-judged: the training's rule had {decision} it; later steps were measured "
                       f"against the best that rule kept]")
            changed.append(f"step {step} {candidate}: {decision} -> {new}")
        info = store.run_info(con, run_id)
        floors = judge.load_floors(con, run_id)
        widest = [f for level in info.levels if (f := floors.floor(info.primary[0], info.repeats, level))
                  is not None]
        con.execute(sql("update_step"), [new, reason, max(widest) if widest else math.nan,
                                         run_id if floors.by_level else None, step])
    con.execute("CHECKPOINT")
    return Rejudged(len(runs), revalidated, changed, report.verdict_sentence(con) if steps else None)


def training_from_report(con: duckdb.DuckDBPyConnection, report_md: Path) -> None:
    """A schema-1 record's training row, taken once from its REPORT.md (what train had written)."""
    if con.execute(sql("training")).fetchone() is not None:
        return
    text = report_md.read_text()
    profile = re.search(r"^Profile: `([^`]+)`", text, re.M)
    command = re.search(r"^## Reproduce\n\n```sh\n(.+)\n```", text, re.M)
    took = re.search(r"^Training took ([0-9.]+) minutes", text, re.M)
    section = re.search(r"^## Limitations\n\n(.*?)\n\n##", text, re.M | re.S)
    workload = re.search(r"^# Training record: `([^`]+)` on workload `([^`]+)`", text, re.M)
    if not (profile and command and section and workload):
        raise InputError(f"{report_md}: not a REPORT.md written by threadwise train",
                         hint="rejudge needs it once for a record written before ladder schema 2")
    limitations = [line[2:] for line in section.group(1).splitlines() if line.startswith("- ")]
    store.insert(con, "training", [{
        "name": workload.group(1), "workload": workload.group(2), "command": command.group(1),
        "profile_path": profile.group(1), "wall_s": float(took.group(1)) * 60 if took else None,
        "limitations": json.dumps([item.replace("(LAB.md)", "(docs/lab.md)") for item in limitations])}])


def rewrite_header(profile: Path, record: Path, verdict: str) -> None:
    """The profile's comment header again, with the re-judged verdict (body unchanged)."""
    text = profile.read_text()
    body_at = text.find("# threadwise profile")
    if body_at < 0:
        raise InputError(f"{profile}: no `# threadwise profile` line after its header")
    old = text[:body_at]
    when = re.search(r"^# Trained by threadwise on (.+) UTC with:", old, re.M)
    command = re.search(r"^#   (.+)$", old, re.M)
    if not (when and command):
        raise InputError(f"{profile}: not a trained profile (no `# Trained by threadwise` header)")
    header = outcome.profile_header(command.group(1), record, verdict, when=when.group(1))
    kept_mark = outcome.keep_default_header() if says_keep_default(old) else ""
    profile.write_text(kept_mark + header + text[body_at:])


def place(con: duckdb.DuckDBPyConnection, record: Path, profile: Path, verdict: str) -> Path:
    """The record's profile with the re-judged verdict in its header, where that verdict puts it
    (outcome.py): a profile that no longer beats the default scheduler leaves the profiles folder
    for the record, as the best candidate not to apply, and the training row says where it went.
    Returns where it is."""
    rewrite_header(profile, record, verdict)
    name = con.execute(sql("training")).fetchone()[0]
    chosen = outcome.decide(con, profile, record, name)
    if chosen.wins or profile == chosen.path:
        return profile
    outcome.write(chosen, "", profile.read_text(), profile)
    con.execute(sql("move_profile"), [str(chosen.path)])
    return chosen.path


def rejudge_record(record: Path, profile: Path | None = None) -> list[str]:
    """`threadwise rejudge RECORD`: judge a training record (artifacts/NAME/) or a bare ladder file
    again and, for a record, rewrite REPORT.md, its plots and the profile's header (`profile`, else
    the one the record names), moving a profile that no longer wins aside. The lines to print."""
    ladder_file = record / "ladder.duckdb" if record.is_dir() else record
    con = store.open_ladder(ladder_file, read_only=not ladder_file.is_file())
    lines: list[str] = []
    try:
        if record.is_dir() and (record / "REPORT.md").is_file():
            training_from_report(con, record / "REPORT.md")
        result = rejudge_file(con)
        if record.is_dir():
            row = con.execute(report.sql("training")).fetchone()
            target = profile or Path(row[3])
            if target.is_file() and result.verdict is not None:
                placed = place(con, record, target, result.verdict)
                lines.append(f"rejudge: rewrote {target}'s header" if placed == target else
                             f"rejudge: {target} does not beat the default scheduler by today's judge: "
                             f"moved to {placed} (keep the default; {record / 'KEEP-DEFAULT.md'} says why)")
            report.write_report(con, record)
    finally:
        con.close()
    lines.append(f"rejudge: {result.runs} runs judged again in {ladder_file}"
                 + (f"; {result.revalidated} cells the profile's starved background had made invalid "
                    "are valid by today's rule" if result.revalidated else ""))
    if result.verdict is None:   # `threadwise ladder`'s file: comparisons, no training to headline
        lines.append("  a ladder without training steps: its comparisons are stored again, no verdict of "
                     "a trained profile to give")
        return lines
    lines += [f"  {line}" for line in result.changed or ["no step decision changed"]]
    lines.append(result.verdict.replace("**", ""))
    return lines
