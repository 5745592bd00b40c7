"""The one judge of stored ladder runs: comparisons with the run's own A/A noise, stored and returned.

Everything that shows or uses a verdict (REPORT.md, the README's tables, `threadwise ladder`,
the refine loop, `threadwise rejudge`) goes through `judge`: the numbers come from the file
(valid cells only), the statistics from `stats.py` (noise from the same run's A/A arm at the
same level, when the run has one), and the result goes back into the file's `comparison`
table (and the A/A arm's own floors, for reports, into `floor`), so a report, a notebook or a
test recomputes every verdict from the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import duckdb

from threadwise.refine.measure import stats, store
from threadwise.refine.measure.plan import AA_ARM, BASELINE


@dataclass(frozen=True)
class Judged:
    """A measured run as the search reads it: its figures, and the comparisons the judge stored for
    it, by (reference, candidate); the search decides from exactly these, so what is stored is
    what decided."""

    measured: stats.Measured
    comparisons: Mapping[tuple[str, str], stats.LadderComparison]


def twins_of(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[str, str] | None:
    """(baseline, its A/A repeat) when the run measured both, else None."""
    arms = {row[0] for row in con.execute(store.sql("run_arms"), [run_id]).fetchall()}
    return (BASELINE, AA_ARM) if {BASELINE, AA_ARM} <= arms else None


def judge(con: duckdb.DuckDBPyConnection, run_id: int, reference: str,
          candidate: str, *, measured: stats.Measured | None = None) -> stats.LadderComparison:
    """compare_arms(reference -> candidate) on the run's valid cells (`measured`: those figures,
    when the caller read them already), with the run's own A/A noise; stored, then returned."""
    info = store.run_info(con, run_id)
    twins = twins_of(con, run_id)
    result = stats.compare_arms(measured if measured is not None else store.measured(con, run_id),
                                reference, candidate,
                                primary=info.primary, secondary=info.secondary,  # type: ignore[arg-type]
                                twins=twins)
    method = stats.METHOD + (f"; A/A arm {twins[1]}" if twins else
                             "; no A/A arm in this run: the pairs' own residuals only") + (
        f"; each interval at alpha {result.each_alpha:.4g} ({stats.ALPHA} over "
        f"{round(stats.ALPHA / result.each_alpha)} comparisons)")
    con.execute(store.sql("delete_comparison"), [run_id, reference, candidate])
    store.insert(con, "comparison", [{
        "run_id": run_id, "reference": reference, "candidate": candidate, "metric": c.metric,
        "level": c.level, "reference_median": _finite(c.reference_median),
        "candidate_median": _finite(c.candidate_median), "ratio": _finite(c.ratio),
        "ci_low": _finite(c.ci_low), "ci_high": _finite(c.ci_high), "n_reference": c.n_reference,
        "n_candidate": c.n_candidate, "verdict": c.verdict.value, "pairs": c.pairs,
        "pairs_disturbed": c.pairs_disturbed, "floor": _finite(c.floor), "method": method,
        "noise_sd": _finite(c.noise.sd), "noise_df": c.noise.df, "aa_pairs": c.noise.aa_pairs,
    } for c in (*result.primary, *result.secondary)])
    return result


def _finite(value: float) -> float | None:
    """NaN (no samples, no interval) is stored as NULL."""
    return None if math.isnan(value) else value


def store_floors(con: duckdb.DuckDBPyConnection, run_id: int, *,
                 measured: stats.Measured | None = None) -> stats.Floors:
    """The A/A arm's own noise per metric and level (what reports show as the run's floors),
    stored in `floor` for n = 1..8 pairs; NO_FLOORS when the run has no A/A arm. `measured`: the
    run's valid cells, when the caller read them already."""
    twins = twins_of(con, run_id)
    if twins is None:
        return stats.NO_FLOORS
    info = store.run_info(con, run_id)
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    cells = measured if measured is not None else store.measured(con, run_id)
    floors = stats.aa_floors(cells, *twins, metrics, run_id=run_id)
    con.execute(store.sql("delete_floors"), [run_id])
    store.insert(con, "floor", [
        {"run_id": run_id, "metric": metric, "level": level, "n": n, "floor": half,
         "aa_pairs": noise.aa_pairs, "method": floors.method}
        for metric, levels in floors.by_level.items() for level, noise in levels.items()
        for n in range(1, 9) if (half := floors.floor(metric, n, level)) is not None])
    return floors


def load_floors(con: duckdb.DuckDBPyConnection, run_id: int | None) -> stats.Floors:
    """The A/A floors of run `run_id`, recomputed from its cells (NO_FLOORS: no run, no A/A arm)."""
    if run_id is None:
        return stats.NO_FLOORS
    twins = twins_of(con, run_id)
    if twins is None:
        return stats.NO_FLOORS
    info = store.run_info(con, run_id)
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    return stats.aa_floors(store.measured(con, run_id), *twins, metrics, run_id=run_id)
