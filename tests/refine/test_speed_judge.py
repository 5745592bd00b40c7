"""benchmarks/speed_judge.py (a candidate judge, not train's): the host's speed is taken out of
each pair with one slope fitted on the comparison's and the A/A pairs, and a comparison with a
cell without a speed is stats.compare's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import speed_judge

from threadwise.refine.measure import stats
from threadwise.refine.measure.stats import Measured, Obs, Verdict

TWINS = ("baseline", "baseline-aa")


def speed_run(effect: float, *, slope: float = 1.5, repeats: int = 6, seed: int = 5) -> Measured:
    """Three arms whose cells follow the host's speed (+-20% from cell to cell, independent of
    the arm) with `slope`; the candidate is `effect` times the baseline, 1% noise besides."""
    rng = np.random.default_rng(seed)
    arms: Measured = {}
    speeds = {}
    for arm, factor in (("baseline", 1.0), ("baseline-aa", 1.0), ("cand", effect)):
        speed = 3e7 * np.exp(rng.normal(0, 0.2, repeats))
        values = 1000 * factor * (speed / 3e7) ** slope * np.exp(rng.normal(0, 0.01, repeats))
        arms[arm] = {0: {"m": {r: Obs(float(v)) for r, v in enumerate(values)}}}
        speeds.update({(arm, 0, r): float(s) for r, s in enumerate(speed)})
    return speed_judge.with_speeds(arms, speeds)


def judged(measured: Measured) -> stats.Comparison:
    return speed_judge.compare_arms(measured, "baseline", "cand", primary=("m", "higher"),
                                    twins=TWINS).primary[0]


def test_the_speed_is_taken_out_and_the_effect_kept() -> None:
    measured = speed_run(1.3)
    adjusted = judged(measured)
    plain = stats.compare_arms(measured, "baseline", "cand", primary=("m", "higher"), twins=TWINS).primary[0]
    assert adjusted.noise.df == 6 + 6 - 2                 # one degree of freedom spent on the slope
    assert adjusted.ratio == pytest.approx(1.3, rel=0.02)
    assert adjusted.ci_high - adjusted.ci_low < (plain.ci_high - plain.ci_low) / 5
    assert adjusted.verdict is Verdict.BETTER


def test_identical_arms_are_within_noise() -> None:
    assert judged(speed_run(1.0, seed=8)).verdict is Verdict.WITHIN_NOISE


def test_a_cell_without_a_speed_leaves_the_comparison_to_stats() -> None:
    measured = speed_run(1.3)
    del measured["cand"][0][speed_judge.SPEED][2]
    plain = stats.compare_arms(measured, "baseline", "cand", primary=("m", "higher"), twins=TWINS).primary[0]
    assert judged(measured) == plain
