"""benchmarks/host_covariate.py: the adjustment takes out exactly a covariate's share, fitted on
the baseline arms alone, and the table reads the committed calibration pool (no VM)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import host_covariate

ROOT = Path(__file__).resolve().parents[2]


def test_a_covariates_share_is_taken_out_with_the_slope_of_the_baseline_arms() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for repeat in range(1, 9):
        for arm in ("baseline", "baseline-aa", "baseline-aa2", "exclusive"):
            cpu = 1.2 + rng.normal(0, 0.05)
            # the metric follows the covariate with slope 2 in every arm; exclusive is 1.5x better
            y = np.log(3000.0) + 2.0 * (cpu - 1.2) + (np.log(1.5) if arm == "exclusive" else 0.0)
            rows.append((arm, repeat, cpu, 0.01, y))
    raw = host_covariate.adjusted(rows, ())
    fitted = host_covariate.adjusted(rows, ("host_cpu_s",))
    assert np.std(host_covariate.log_ratios(raw, "baseline-aa", "baseline")) > 0.05
    assert np.allclose(host_covariate.log_ratios(fitted, "baseline-aa", "baseline"), 0.0, atol=1e-9)
    assert np.allclose(host_covariate.log_ratios(fitted, "exclusive", "baseline"), np.log(1.5), atol=1e-9)


def test_the_table_reads_the_committed_pool() -> None:
    text = host_covariate.table(ROOT / "benchmarks" / "data" / "lab-calibration-w10.duckdb", [3])
    rows = [line for line in text.splitlines() if line.startswith("| hot_chunks_per_s | 3 |")]
    assert [row.split(" | ")[3] for row in rows] == ["raw", "cpu", "wait", "both"] * 2
    assert all("(8)" in row for row in rows)   # 8 repeats a pair in run 3
