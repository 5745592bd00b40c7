"""Judge a stored ladder run: compare arms from the ladder file and store the comparisons.

The numbers come from the file (valid cells only), the statistics from
`stats.py`, and the result goes back into the file's `comparison` table, so
that a report, a notebook or a test can recompute every verdict from the
same rows.
"""

from __future__ import annotations

import math

import duckdb

from threadwise.refine import stats, store


def judge(con: duckdb.DuckDBPyConnection, run_id: int, reference: str, candidate: str, *,
          noise: float = 0.0) -> stats.LadderComparison:
    """compare_arms(reference -> candidate) on the run's valid samples; stored, then returned."""
    info = store.run_info(con, run_id)
    result = stats.compare_arms(store.measured(con, run_id), reference, candidate,
                                primary=info.primary, secondary=info.secondary,  # type: ignore[arg-type]
                                noise=noise, seed=info.seed)
    con.execute(store.sql("delete_comparison"), [run_id, reference, candidate])
    store.insert(con, "comparison", [{
        "run_id": run_id, "reference": reference, "candidate": candidate, "metric": c.metric,
        "level": c.level, "reference_median": _finite(c.reference_median),
        "candidate_median": _finite(c.candidate_median), "ratio": _finite(c.ratio),
        "ci_low": _finite(c.ci_low), "ci_high": _finite(c.ci_high), "n_reference": c.n_reference,
        "n_candidate": c.n_candidate, "verdict": c.verdict.value,
    } for c in (*result.primary, *result.secondary)])
    return result


def _finite(value: float) -> float | None:
    """NaN (no samples) is stored as NULL; +inf (a ratio over a zero median) as is."""
    return None if math.isnan(value) else value


def aa_noise(con: duckdb.DuckDBPyConnection, run_id: int, arm_a: str, arm_b: str) -> float:
    """The noise floor of an A/A run (two arms of the same scheduler)."""
    return stats.noise_floor(judge(con, run_id, arm_a, arm_b).primary)
