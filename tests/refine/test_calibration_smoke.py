"""benchmarks/calibration.py on small synthetic pools (no VM).

Its judge must be stats.compare_arms with the run's own twins on exactly the drawn repeats,
identical arms built from log-normal noise must read false about as often as ALPHA allows
(Student's t is exact there), an injected 1.3x effect in quiet noise must be found, a pool
file written by store.py must load (runs without the third identical arm left out, with the
reason) and print the rate lines the README and RESULTS.md quote.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import calibration as cal

from threadwise.refine.measure import stats, store
from threadwise.refine.measure.plan import AA_ARM, BASELINE
from threadwise.refine.measure.stats import Measured, Obs

PRIMARY, SECONDARY = "hot_chunks_per_s", "worker_lat_p99_us"
METRICS: tuple[tuple[str, stats.Direction], ...] = ((PRIMARY, "higher"), (SECONDARY, "lower"))
LEVELS = (0, 2)
ARMS = (BASELINE, AA_ARM, cal.TWIN, cal.EFFECT_ARM, cal.BAD_ARM)


def synthetic(repeats: int = 8, *, seed: int = 4, spread: float = 0.05) -> Measured:
    """Five arms; per (level, repeat) a drift shared by the arms (what pairing cancels) and
    independent log-normal noise per cell. `exclusive` gains 1.6x on the primary at bg=2; `bad`
    has a 3x worse secondary at bg=2."""
    rng = np.random.default_rng(seed)
    measured: Measured = {arm: {level: {PRIMARY: {}, SECONDARY: {}} for level in LEVELS} for arm in ARMS}
    for repeat in range(1, repeats + 1):
        for level in LEVELS:
            drift = rng.normal(0.0, 0.2)
            for arm in ARMS:
                gain = 1.6 if arm == cal.EFFECT_ARM and level == 2 else 1.0
                loss = 3.0 if arm == cal.BAD_ARM and level == 2 else 1.0
                rate = 1000.0 / (1 + level) * gain * np.exp(drift + rng.normal(0, spread))
                latency = 400.0 * (1 + level) * loss * np.exp(-drift + rng.normal(0, spread))
                measured[arm][level][PRIMARY][repeat] = Obs(float(rate), 0.01)
                measured[arm][level][SECONDARY][repeat] = Obs(float(latency), 0.01)
    return measured


def pool_of(measured: Measured, repeats: int = 8) -> cal.Pool:
    return cal.Pool("synthetic", measured, METRICS, LEVELS, tuple(range(1, repeats + 1)),
                    (repeats * len(LEVELS) * len(ARMS),) * 2, 3.0)


def test_the_draws_are_stats_compare_arms_on_the_drawn_repeats() -> None:
    pool = pool_of(synthetic())
    result = cal.calibrate(pool, n=3, limit=10, seed=1, early_k=None)
    chosen = cal.draws_of(pool.repeats, 3, 10, 1)
    swap = np.random.default_rng([1, 3, 1]).random(len(chosen)) < 0.5
    for d, repeats in enumerate(chosen):
        part = cal.restrict(pool.measured, repeats)
        reference, candidate = (cal.TWIN, BASELINE) if swap[d] else (BASELINE, cal.TWIN)
        expected = stats.compare_arms(part, reference, candidate, primary=METRICS[0],
                                      secondary=list(METRICS[1:]), twins=(BASELINE, AA_ARM))
        assert (result.false[d] == cal.codes(expected, METRICS)).all()
    # the draws take every arm's cells of the same repeats: pairs and the A/A pairs stay pairs
    part = cal.restrict(pool.measured, (2, 5, 7))
    assert sorted(part[AA_ARM][0][PRIMARY]) == [1, 2, 3]
    assert part[AA_ARM][0][PRIMARY][2] == pool.measured[AA_ARM][0][PRIMARY][5]


def test_identical_arms_read_false_near_alpha_and_effects_are_found() -> None:
    """Log-normal noise is the t-test's own model: the rate must sit near ALPHA (the seeds are
    fixed; over 56 overlapping draws of one pool, a rate of 0-15% is what that allows)."""
    pool = pool_of(synthetic(repeats=8, spread=0.05))
    result = cal.calibrate(pool, n=3, limit=2000, seed=1, early_k=2)
    assert result.draws == 56  # every 3 of 8
    rates = [result.rate(result.false, i) for i in range(len(METRICS))]
    assert max(rates) <= 0.15, rates
    bg2 = LEVELS.index(2)
    assert (result.known[cal.EFFECT_ARM][:, 0, bg2] == cal.BETTER).mean() >= 0.9  # 1.6x against +-5%
    assert (result.known[cal.EFFECT_ARM][:, 0, 0] == cal.BETTER).mean() <= 0.2  # no effect at bg=0
    assert (result.known[cal.BAD_ARM][:, 1, bg2] == cal.WORSE).mean() >= 0.9  # the veto fires
    assert result.rate(result.injected[0], 0, which=(cal.BETTER,)) >= 0.8  # 1.3x against +-5%
    assert result.rate(result.injected[1], 1, which=(cal.WORSE,)) >= 0.8
    assert result.stops["bad"].mean() >= 0.5 and result.stops["aa"].mean() <= 0.05


def test_mixed_pools_keep_their_repeats_apart() -> None:
    quiet, loud = pool_of(synthetic(4, seed=1, spread=0.01), 4), pool_of(synthetic(4, seed=2, spread=0.3), 4)
    both = cal.mixed(quiet, loud)
    assert both.repeats == tuple(range(1, 9))
    assert both.measured[BASELINE][0][PRIMARY][5] == loud.measured[BASELINE][0][PRIMARY][1]


def write_pool(path: Path, measured: Measured, repeats: int) -> None:
    con = store.open_ladder(path)
    try:
        for run_id, completed, arms in ((1, True, ARMS), (2, False, ARMS), (3, True, ARMS[:2])):
            store.insert(con, "run", [{
                "run_id": run_id, "started": dt.datetime(2026, 1, 1), "command": "test",
                "purpose": "synthetic", "workload": "rolesim", "workload_toml": "",
                "primary_metric": PRIMARY, "primary_direction": "higher",
                "secondary": json.dumps([{"metric": SECONDARY, "direction": "lower"}]),
                "levels": json.dumps(list(LEVELS)), "repeats": repeats, "arm_order": "rotate", "seed": 1,
                "window_s": 3.0, "warmup_s": 1.0, "host_kernel": "k", "vcpus": 2, "tcg": True,
                "scx_version": "x", "shape": "s", "completed": completed}])
            store.insert(con, "arm", [{"run_id": run_id, "arm": arm, "kind": "baseline"} for arm in arms])
            cells, samples, idx = [], [], 0
            for arm in arms:
                for level in LEVELS:
                    for repeat in range(1, repeats + 1):
                        idx += 1
                        obs = measured[arm][level][PRIMARY][repeat]
                        cells.append({"run_id": run_id, "idx": idx, "arm": arm, "level": level,
                                      "repeat": repeat, "valid": True, "reasons": "",
                                      "host_cpu_s": 1.0 - (obs.denied or 0.0), "host_wait_s": obs.denied})
                        samples += [{"run_id": run_id, "idx": idx, "metric": m,
                                     "value": measured[arm][level][m][repeat].value}
                                    for m in (PRIMARY, SECONDARY)]
            store.insert(con, "cell", cells)
            store.insert(con, "sample", samples)
    finally:
        con.close()


def test_pool_file_loads_and_prints_the_rate_lines(tmp_path: Path) -> None:
    path = tmp_path / "pool.duckdb"
    write_pool(path, synthetic(6), 6)
    pools, notes = cal.load_pools(path, None)
    assert [p.label for p in pools] == ["run 1: synthetic"]
    assert "not completed" in notes[0] and f"no {cal.TWIN}" in notes[1]
    pool = pools[0]
    assert pool.metrics == METRICS and pool.levels == LEVELS and pool.repeats == tuple(range(1, 7))
    text = "\n".join(cal.render(pool, cal.calibrate(pool, n=3, limit=50, seed=1, early_k=2), 2))
    for metric in (PRIMARY, SECONDARY):
        assert f"% per comparison ({metric}, n=3, paired-v5)" in text
        assert f"({metric}, n=3, the effect injected" in text
    assert "A/A false verdict rate (floors as train takes them" in text and "Power at 1.3x: " in text
    assert "Known effect: `exclusive`" in text and "Stopped early after 2 of 3" in text


@pytest.mark.parametrize("n", [2, 3])
def test_enumeration_and_sampling(n: int) -> None:
    assert len(cal.draws_of(tuple(range(1, 7)), n, 1000, 1)) == (15 if n == 2 else 20)
    sampled = cal.draws_of(tuple(range(1, 31)), n, 100, 1)
    assert len(sampled) == 100 and all(len(set(d)) == n for d in sampled)
