"""The one judge of stored ladder runs: floors from an A/A run, comparisons, stored and returned.

Everything that shows or uses a verdict (REPORT.md, the README's tables,
`threadwise ladder`, the refine loop, `threadwise rejudge`) goes through
`judge`, with the floors of `aa_floors` / `load_floors`: the numbers come from
the file (valid cells only), the statistics from `stats.py`, and the result
goes back into the file's `comparison` table (and the floors into `floor`),
so a report, a notebook or a test recomputes every verdict from the same rows.
"""

from __future__ import annotations

import math

import duckdb

from threadwise.refine import stats, store


def judge(con: duckdb.DuckDBPyConnection, run_id: int, reference: str, candidate: str, *,
          floors: stats.Floors = stats.NO_FLOORS) -> stats.LadderComparison:
    """compare_arms(reference -> candidate) on the run's valid cells; stored, then returned."""
    info = store.run_info(con, run_id)
    result = stats.compare_arms(store.measured(con, run_id), reference, candidate,
                                primary=info.primary, secondary=info.secondary,  # type: ignore[arg-type]
                                floors=floors)
    con.execute(store.sql("delete_comparison"), [run_id, reference, candidate])
    store.insert(con, "comparison", [{
        "run_id": run_id, "reference": reference, "candidate": candidate, "metric": c.metric,
        "level": c.level, "reference_median": _finite(c.reference_median),
        "candidate_median": _finite(c.candidate_median), "ratio": _finite(c.ratio),
        "ci_low": _finite(c.ci_low), "ci_high": _finite(c.ci_high), "n_reference": c.n_reference,
        "n_candidate": c.n_candidate, "verdict": c.verdict.value, "pairs": c.pairs,
        "pairs_disturbed": c.pairs_disturbed, "floor": _finite(c.floor),
        "method": stats.METHOD + (f"; A/A floors of run {floors.run_id}" if floors.run_id is not None
                                  else "; no A/A floors"),
    } for c in (*result.primary, *result.secondary)])
    return result


def _finite(value: float) -> float | None:
    """NaN (no samples, no interval) is stored as NULL."""
    return None if math.isnan(value) else value


def aa_floors(con: duckdb.DuckDBPyConnection, run_id: int, arm_a: str, arm_b: str) -> stats.Floors:
    """Per-metric floors of an A/A run (two arms of the same scheduler), stored in `floor`.

    The A/A comparison itself is judged (and stored) with those floors too, as a check a
    reader can see: identical arms should read `within_noise`."""
    info = store.run_info(con, run_id)
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    result = stats.floors(store.measured(con, run_id), arm_a, arm_b, metrics, n_max=8, run_id=run_id)
    con.execute(store.sql("delete_floors"), [run_id])
    tables = [(metric, None, table) for metric, table in result.by_metric.items()] + [
        (metric, level, table) for metric, levels in result.by_level.items()
        for level, table in levels.items()]  # level None: pooled over levels
    store.insert(con, "floor", [
        {"run_id": run_id, "metric": metric, "level": level, "n": n, "floor": value,
         "aa_pairs": result.aa_pairs[metric], "method": result.method}
        for metric, level, table in tables for n, value in table.items()])
    judge(con, run_id, arm_a, arm_b, floors=result)
    return result


def load_floors(con: duckdb.DuckDBPyConnection, run_id: int | None) -> stats.Floors:
    """The floors stored for A/A run `run_id` (NO_FLOORS when None or none stored)."""
    if run_id is None:
        return stats.NO_FLOORS
    by_metric: dict[str, dict[int, float]] = {}
    by_level: dict[str, dict[int, dict[int, float]]] = {}
    counts: dict[str, int] = {}
    method = "none"
    for metric, level, n, value, pairs, how in con.execute(store.sql("floors"), [run_id]).fetchall():
        if level is None:
            by_metric.setdefault(metric, {})[int(n)] = float(value)
        else:
            by_level.setdefault(metric, {}).setdefault(int(level), {})[int(n)] = float(value)
        counts[metric] = int(pairs)
        method = how
    if not by_metric:
        return stats.NO_FLOORS
    return stats.Floors(by_metric, counts, run_id, method, by_level)

