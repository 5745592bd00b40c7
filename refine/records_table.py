"""The README's table of trained profiles, generated from the committed training records.

Problem: README's "Trained profiles" must say, per workload, whether its profile beat the
kernel's default scheduler and by how much, and a hand-written table drifts from the records
(a re-judged record, a retired profile). Approach: one row per `artifacts/NAME/ladder.duckdb`,
every figure read from the file by the same judge that wrote its REPORT.md
(`report.final_comparison`): the answer (a profile, or keep the default), the primary metric's
best and worst level with its ratio and verdict, where a secondary metric is worse, the
training's wall minutes, and links to the record and the profile or rejected candidate. README
holds the table between two markers; `python -m threadwise.refine.records_table --write
README.md` rewrites it, and tests/refine/test_records.py fails when they differ.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from threadwise.refine import report
from threadwise.refine.measure import stats, store

BEGIN = "<!-- records-table: begin (python -m threadwise.refine.records_table --write README.md) -->"
END = "<!-- records-table: end -->"


@dataclass(frozen=True)
class RecordRow:
    name: str
    wins: bool
    metric: str
    best: stats.Comparison
    worst: stats.Comparison
    secondary_worse: tuple[stats.Comparison, ...]
    minutes: float
    profile: str


def _gain(comparison: stats.Comparison) -> float:
    """The ratio in the objective's good direction (above 1: better)."""
    return comparison.ratio if comparison.direction == "higher" else 1.0 / comparison.ratio


def record_row(record: Path) -> RecordRow | None:
    """The row of one record (artifacts/NAME/), or None when its final profile was never measured."""
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        final = report.final_comparison(con)
        wall_s, profile = con.execute(store.sql("training_summary")).fetchall()[0]
    finally:
        con.close()
    if final is None or not final.primary:
        return None
    primary = sorted(final.primary, key=_gain)
    # the worst level is a decided loss where there is one (memcached's 0.952x worse at bg=1, not
    # its 0.924x within noise at bg=0): the row must show why the answer is what it is
    worst = min(final.primary, key=lambda c: (c.verdict is not stats.Verdict.WORSE, _gain(c)))
    worse = tuple(c for c in final.secondary if c.verdict is stats.Verdict.WORSE)
    return RecordRow(record.name, final.wins, primary[0].metric, primary[-1], worst, worse,
                     wall_s / 60.0, profile)


def _level(comparison: stats.Comparison) -> str:
    """`bg=4 2.85 [2.6, 3.1] better`: the form every verdict sentence uses, and the verdict."""
    return f"{comparison.describe()} {comparison.verdict.value.replace('_', ' ')}"


def markdown(rows: list[RecordRow]) -> str:
    lines = ["| workload | answer | primary metric | best level | worst level | secondary worse at | "
             "training minutes | record |",
             "|---|---|---|---|---|---|---:|---|"]
    for row in rows:
        answer = "**profile**" if row.wins else "keep the default scheduler"
        worse = "; ".join(f"{c.metric} {c.describe()}" for c in row.secondary_worse) or "none"
        lines.append(f"| {row.name} | {answer} | `{row.metric}` | {_level(row.best)} | {_level(row.worst)} | "
                     f"{worse} | {row.minutes:.1f} | [report](artifacts/{row.name}/REPORT.md), "
                     f"[{'profile' if row.wins else 'rejected candidate'}]({row.profile}) |")
    return "\n".join(lines)


def table(artifacts: Path) -> str:
    rows = [row for record in sorted(p.parent for p in artifacts.glob("*/ladder.duckdb"))
            if (row := record_row(record)) is not None]
    return markdown(rows)


def replaced(text: str, body: str) -> str:
    """`text` with the table between the markers set to `body` (a missing marker is an error)."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"no records table markers in the file: add\n{BEGIN}\n{END}")
    return pattern.sub(lambda _: f"{BEGIN}\n{body}\n{END}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"), help="the records' folder")
    parser.add_argument("--write", type=Path, default=None, help="rewrite the table in this file (README.md)")
    args = parser.parse_args()
    body = table(args.artifacts)
    if args.write is None:
        print(body)
        return
    args.write.write_text(replaced(args.write.read_text(), body))
    print(f"wrote the records table in {args.write}")


if __name__ == "__main__":
    main()
