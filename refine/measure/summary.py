"""A ladder run's cells in words: how much the host took from the lab, and which cells are
invalid and why. The ladder prints these as it finishes a run (run.py), `threadwise ladder`
and `train` print them, and REPORT.md lists the invalid cells (report.py).
"""

from __future__ import annotations

import duckdb

from threadwise.refine.measure.store import sql

# The bursty-loaded calibration pool's median denied share was 0.34, the quiet pool's 0.024
# (benchmarks/data/lab-calibration.duckdb; docs/lab-noise.md): above this a run is reported as
# measured on a busy host.
BUSY_HOST_DENIED = 0.15


def host_line(con: duckdb.DuckDBPyConnection, run_id: int) -> str | None:
    """How much the host took from the lab's vCPUs in this run, and what that means for its verdicts."""
    cells, median, peak = con.execute(sql("host_denied"), [run_id]).fetchone()
    if not cells or median is None:
        return None
    text = (f"Host interference (run {run_id}): the host did not serve a median {median:.1%} of the lab "
            f"vCPUs' demand (max {peak:.1%} in one cell); pairs whose cells it denied unequally are left "
            "out of the verdicts.")
    if median > BUSY_HOST_DENIED:
        text += (" **This run was measured on a busy host**: under bursty host load the calibration "
                 "measured 12-17% false verdicts between identical arms at 3 repeats (5% on a quiet "
                 "host is the target; benchmarks/RESULTS.md). Measure again on a quiet host.")
    return text


def invalid_cells(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    rows = con.execute(sql("invalid_cells"), [run_id]).fetchall()
    return [f"- run {run_id} cell {idx} ({arm}, bg={level}, repeat {rep}): {why}"
            for idx, arm, level, rep, why in rows]


def invalid_summary(con: duckdb.DuckDBPyConnection, run_id: int) -> str:
    """One line for the terminal: how many cells are invalid, per reason kind (the text before a
    reason's first ':', e.g. `membership`), with the first reason of each kind as its example."""
    rows = con.execute(sql("invalid_cells"), [run_id]).fetchall()
    if not rows:
        return "every cell valid"
    kinds: dict[str, tuple[int, str]] = {}
    for *_cell, why in rows:
        first: dict[str, str] = {}   # a cell counts once per kind, with its first reason of that kind
        for reason in filter(None, (part.strip() for part in why.split("; "))):
            first.setdefault(reason.split(":", 1)[0], reason)
        for kind, reason in first.items():
            count, example = kinds.get(kind, (0, reason))
            kinds[kind] = (count + 1, example)
    total = con.execute(sql("cell_count"), [run_id]).fetchone()[0]
    return (f"{len(rows)} of {total} cells invalid: "
            + "; ".join(f"{kind} in {count} (e.g. {example})" for kind, (count, example) in kinds.items()))
