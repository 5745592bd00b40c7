"""benchmarks/calibration.py on a small synthetic pool (no VM).

Its judge must be stats.compare's (the pieces it caches give the same verdicts as
stats.compare_arms on the same cells), identical arms built from the same noise must read
false at most about as often as the floor's 95% quantile allows, a large effect must be
found, the old method's bootstrap must be the plain percentile bootstrap, and a ladder
file written by store.py must load and print the section's lines.
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

from threadwise.refine import stats, store
from threadwise.refine.ladder import AA_ARM, BASELINE
from threadwise.refine.stats import Measured, Obs

PRIMARY, SECONDARY = "hot_chunks_per_s", "worker_lat_p99_us"
METRICS: tuple[tuple[str, stats.Direction], ...] = ((PRIMARY, "higher"), (SECONDARY, "lower"))
LEVELS = (0, 2)
ARMS = (BASELINE, AA_ARM, cal.EFFECT_ARM)


def synthetic(repeats: int = 8, *, effect: float = 1.6, seed: int = 4, spread: float = 0.05,
              denied: bool = False, wide: float = 1.0) -> Measured:
    """Three arms; per (level, repeat) a drift shared by the arms (what pairing cancels) and
    independent noise per cell, `wide` times larger at bg=2. `exclusive` gains `effect` on the
    primary at bg=2 only."""
    rng = np.random.default_rng(seed)
    measured: Measured = {arm: {level: {PRIMARY: {}, SECONDARY: {}} for level in LEVELS} for arm in ARMS}
    for repeat in range(1, repeats + 1):
        for level in LEVELS:
            drift = rng.normal(0.0, 0.2)
            noise = spread * (wide if level == 2 else 1.0)
            for arm in ARMS:
                gain = effect if arm == cal.EFFECT_ARM and level == 2 else 1.0
                share = float(rng.uniform(0.0, 0.15)) if denied else 0.01
                rate = 1000.0 / (1 + level) * gain * np.exp(drift + rng.normal(0, noise))
                latency = 400.0 * (1 + level) * np.exp(-drift + rng.normal(0, noise))
                measured[arm][level][PRIMARY][repeat] = Obs(rate, share)
                measured[arm][level][SECONDARY][repeat] = Obs(latency, share)
    return measured


def pool_of(measured: Measured, repeats: int = 8) -> cal.Pool:
    return cal.Pool(1, "synthetic", measured, METRICS, LEVELS, tuple(range(1, repeats + 1)), 3.0,
                    (repeats * len(LEVELS) * len(ARMS),) * 2)


def test_cached_judge_gives_stats_compare_verdicts():
    # some pairs denied apart (left out alike), and bg=2 noisier (its own floor, not the pooled one)
    pool = pool_of(synthetic(denied=True, wide=4.0))
    judge = cal.Judge(pool)
    rng = np.random.default_rng(7)
    names = [m for m, _ in METRICS]
    level_floors = 0
    for _ in range(25):
        order = [int(r) for r in rng.permutation(pool.repeats)[:6]]
        train, comparison = tuple(sorted(order[:3])), tuple(sorted(order[3:]))
        reference, candidate = (AA_ARM, BASELINE) if rng.random() < 0.5 else (BASELINE, AA_ARM)
        floors = stats.floors(cal.restrict(pool.measured, (BASELINE, AA_ARM), train), BASELINE, AA_ARM, names)
        expected = stats.compare_arms(cal.restrict(pool.measured, ARMS, comparison), reference, candidate,
                                      primary=METRICS[0], secondary=METRICS[1:], floors=floors)
        cached = judge.floors(train, BASELINE, AA_ARM, 3)
        got = judge.ladder(reference, candidate, comparison, cached)
        want = np.array([[cal.CODE[c.verdict] for c in expected.comparisons(m)] for m in names])
        assert (got == want).all()
        level_floors += sum(cached.floor(m, 3, 2) != cached.floor(m, 3) for m in names)
    assert level_floors > 0  # the per-level floors were exercised


def test_identical_arms_read_false_near_the_target_and_an_effect_is_found():
    """The rate is conditional on the pool: over synthetic pools of this size (8 repeats, 2
    levels, so 6 A/A pairs per train floor) it scatters around 5% (about 1-13% per metric), so
    the bound is wide; the seeds are fixed, so it cannot flake."""
    pool = pool_of(synthetic())
    result = cal.calibrate(pool, n=3, draws=300, seed=1, n_boot=500)
    rates = [result.rate(cal.NEW, i) for i in range(len(METRICS))]
    assert float(np.mean(rates)) >= 0.005 and max(rates) <= 0.15, rates
    for method in cal.METHODS:
        for i in range(len(METRICS)):
            rate = result.rate(method, i)
            assert method == cal.OWN or rate <= 0.15, (method, METRICS[i], rate)
            assert result.familywise(method, i) >= rate
        assert result.familywise(method) >= max(result.familywise(method, i) for i in range(len(METRICS)))
    # without the A/A floor the interval is never wider: every false verdict stays false
    assert (result.false(cal.OWN) >= result.false(cal.NEW)).all()
    assert np.isfinite(result.floor).all() and (result.floor > 0).all()
    assert (result.old_margin >= 0).all()
    bg0, bg2 = LEVELS.index(0), LEVELS.index(2)
    better = result.power[cal.NEW][:, 0, :] == cal.BETTER
    assert better[:, bg2].mean() >= 0.9  # a 1.6x gain against +-5% noise
    assert better[:, bg0].mean() <= 0.12  # no effect at bg=0
    assert (result.power[cal.OLD][:, 0, bg2] != cal.INSUFFICIENT).all()


def test_median_ranks_are_the_bootstrap_median_distribution():
    low, high, prob = cal.median_ranks(3)
    assert (low == high).all() and prob.sum() == pytest.approx(1.0)
    assert prob[list(low).index(0)] == pytest.approx(7 / 27)  # two or three of three draws are the lowest
    low, high, prob = cal.median_ranks(2)
    assert dict(zip(zip(low.tolist(), high.tolist(), strict=True), prob.tolist(), strict=True)) == \
        pytest.approx({(0, 0): 0.25, (0, 1): 0.5, (1, 1): 0.25})
    for k in (4, 5):
        assert cal.median_ranks(k)[2].sum() == pytest.approx(1.0)


def test_old_ci_is_the_percentile_bootstrap():
    """Against the removed stats.compare's bootstrap (index resampling) on the same data: the
    bounds are order statistics of a small discrete distribution, so they agree."""
    reference = np.array([[100.0, 104.0, 97.0], [50.0, 51.0, np.nan]])
    candidate = np.array([[110.0, 99.0, 120.0], [49.0, 55.0, 60.0]])
    low, high, enough = cal.old_ci(reference, candidate, np.random.default_rng(1), 4000)
    assert enough.all()
    rng = np.random.default_rng(2)
    for row in range(2):
        ref, cand = reference[row][np.isfinite(reference[row])], candidate[row]
        ref_boot = np.median(ref[rng.integers(0, ref.size, (4000, ref.size))], axis=1)
        cand_boot = np.median(cand[rng.integers(0, cand.size, (4000, cand.size))], axis=1)
        ratios = cand_boot / ref_boot
        assert low[row] == pytest.approx(np.quantile(ratios, 0.025, method="lower"))
        assert high[row] == pytest.approx(np.quantile(ratios, 0.975, method="higher"))
    low, high, enough = cal.old_ci(np.array([[1.0, np.nan, np.nan]]), np.array([[1.0, 2.0, 3.0]]),
                                   np.random.default_rng(1), 100)
    assert not enough[0] and np.isnan(low[0])


def write_pool(path: Path, measured: Measured, repeats: int) -> None:
    con = store.open_ladder(path)
    try:
        for run_id, completed in ((1, True), (2, False)):
            store.insert(con, "run", [{
                "run_id": run_id, "started": dt.datetime(2026, 1, 1), "command": "test",
                "purpose": "synthetic", "workload": "rolesim", "workload_toml": "",
                "primary_metric": PRIMARY, "primary_direction": "higher",
                "secondary": json.dumps([{"metric": SECONDARY, "direction": "lower"}]),
                "levels": json.dumps(list(LEVELS)), "repeats": repeats, "arm_order": "abba", "seed": 1,
                "window_s": 3.0, "warmup_s": 1.0, "host_kernel": "k", "vcpus": 2, "tcg": True,
                "scx_version": "x", "shape": "s", "completed": completed}])
            store.insert(con, "arm", [{"run_id": run_id, "arm": arm, "kind": "baseline"} for arm in ARMS])
            cells, samples, idx = [], [], 0
            for arm in ARMS:
                for level in LEVELS:
                    for repeat in range(1, repeats + 1):
                        idx += 1
                        obs = measured[arm][level][PRIMARY][repeat]
                        cells.append({"run_id": run_id, "idx": idx, "arm": arm, "level": level,
                                      "repeat": repeat, "valid": True, "reasons": "",
                                      "host_cpu_s": 1.0 - obs.denied, "host_wait_s": obs.denied})
                        samples += [{"run_id": run_id, "idx": idx, "metric": m,
                                     "value": measured[arm][level][m][repeat].value}
                                    for m in (PRIMARY, SECONDARY)]
            store.insert(con, "cell", cells)
            store.insert(con, "sample", samples)
    finally:
        con.close()


def test_pool_file_loads_and_prints_the_rate_lines(tmp_path):
    path = tmp_path / "pool.duckdb"
    write_pool(path, synthetic(6), 6)
    pools, notes = cal.load_pools(path, None)
    assert [p.run_id for p in pools] == [1] and "not completed" in notes[0]
    pool = pools[0]
    assert pool.metrics == METRICS and pool.levels == LEVELS and pool.repeats == tuple(range(1, 7))
    results = {n: cal.calibrate(pool, n=n, draws=40, seed=1, n_boot=200, old=n == 3) for n in (2, 3)}
    text = "\n".join(cal.render(pool, results, 3, cal.spread(pool, 3), cal.denied_gaps(pool)))
    for metric in (PRIMARY, SECONDARY):
        for method in cal.METHODS:
            assert f"% per comparison ({metric}, n=3, {method})" in text
    assert "A/A false verdict rate: " in text and "Power on a known effect" in text
    assert "| 2 | 0 |" in text  # the extra n in the power table
