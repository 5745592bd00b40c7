"""The canary's sequential judge (refine/canary/sequence.py): read after every pair, it keeps its
alpha on A/A streams, simulated and resampled from a real lab pool, and it does decide clear
effects, in both directions."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from threadwise.refine.canary.sequence import ConfidenceSequence, Decision, Metric, Sequential
from threadwise.refine.measure import store
from threadwise.refine.measure.plan import AA_ARM, BASELINE

POOL = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "lab-calibration.duckdb"
ALPHA = 0.05
GRID = 201  # coarser than the product's (2001): bounds to 1/200 of the clipped range, for speed
PRIMARY = Metric("hot_chunks_per_s", higher_is_better=True, margin=0.10, primary=True)
SECONDARY = Metric("worker_lat_p99_us", higher_is_better=False, margin=0.10)


def first_decision(judge: Sequential, pairs: np.ndarray) -> tuple[Decision, int]:
    """Feed oriented log ratios (pairs x metrics), reading the decision after every pair."""
    for n, row in enumerate(pairs, start=1):
        for metric, value in zip(judge.metrics, row, strict=True):
            judge.add(metric, float(value))
        decided = judge.decision()
        if decided is not Decision.UNDECIDED:
            return decided, n
    return Decision.UNDECIDED, len(pairs)


def false_alarms(streams: list[np.ndarray]) -> float:
    decided = [first_decision(Sequential([PRIMARY, SECONDARY], ALPHA, GRID), s)[0] for s in streams]
    return sum(d is not Decision.UNDECIDED for d in decided) / len(streams)


@pytest.mark.parametrize("noise", ["normal", "heavy-tailed", "skewed"])
def test_simulated_aa_streams_keep_alpha_under_continuous_monitoring(noise):
    """Identical arms: any decision at any pair is false. 200 streams of 150 pairs, every pair read."""
    rng = np.random.default_rng(7)
    draw = {
        "normal": lambda size: rng.normal(0.0, 0.15, size),
        "heavy-tailed": lambda size: 0.1 * rng.standard_t(2, size),
        # a skewed log ratio, symmetric by construction only through the pair's order (A/A arms
        # are exchangeable: which one is the "profile" is a coin flip)
        "skewed": lambda size: rng.choice([-1.0, 1.0], size) * rng.lognormal(-2.5, 1.0, size),
    }[noise]
    streams = [np.clip(draw((150, 2)), -math.log(1.5), math.log(1.5)) for _ in range(200)]
    rate = false_alarms(streams)
    assert rate <= ALPHA, f"{noise}: {rate:.1%} of A/A streams decided"


def aa_pairs(path: Path) -> dict[str, np.ndarray]:
    """Each metric's A/A log ratios (baseline-aa against baseline, same level and repeat) in a pool."""
    con = store.open_ladder(path, read_only=True)
    try:
        out: dict[str, list[float]] = {PRIMARY.name: [], SECONDARY.name: []}
        for (run_id,) in con.execute("SELECT run_id FROM run WHERE completed ORDER BY run_id").fetchall():
            measured = store.measured(con, run_id)
            for level, metrics in measured.get(AA_ARM, {}).items():
                for name in out:
                    twin, base = metrics.get(name, {}), measured[BASELINE].get(level, {}).get(name, {})
                    out[name] += [math.log(twin[r].value / base[r].value) for r in twin.keys() & base.keys()
                                  if twin[r].value > 0 and base[r].value > 0]
    finally:
        con.close()
    return {name: np.array(values) for name, values in out.items()}


def test_aa_streams_resampled_from_a_real_lab_pool_keep_alpha():
    """The lab pool's own A/A pairs (both runs, every level), resampled with a random sign each
    (the two identical arms are exchangeable), as 200 streams of 120 pairs read after every pair."""
    pairs = aa_pairs(POOL)
    assert min(len(v) for v in pairs.values()) >= 30, {k: len(v) for k, v in pairs.items()}
    rng = np.random.default_rng(11)
    judge = Sequential([PRIMARY, SECONDARY], ALPHA, GRID)
    streams = []
    for _ in range(200):
        columns = [rng.choice([-1.0, 1.0], 120) * rng.choice(pairs[m.name], 120) for m in judge.metrics]
        streams.append(np.clip(np.column_stack(columns), -math.log(1.5), math.log(1.5)))
    rate = false_alarms(streams)
    assert rate <= ALPHA, f"{rate:.1%} of resampled A/A streams decided"


def test_a_clear_loss_rolls_back_and_a_clear_gain_is_kept():
    rng = np.random.default_rng(3)
    noise = rng.normal(0.0, 0.1, (200, 2))
    loss = noise + np.array([math.log(1 / 1.3), 0.0])   # the primary 1.3x worse
    gain = noise + np.array([math.log(1.3), 0.0])       # the primary 1.3x better, the secondary as it was
    worse, n_worse = first_decision(Sequential([PRIMARY, SECONDARY], ALPHA, GRID), loss)
    better, n_better = first_decision(Sequential([PRIMARY, SECONDARY], ALPHA, GRID), gain)
    assert worse is Decision.WORSE and n_worse <= 40, n_worse
    assert better is Decision.BETTER and n_better <= 60, n_better


def test_a_secondary_loss_vetoes_a_primary_gain():
    rng = np.random.default_rng(5)
    pairs = rng.normal(0.0, 0.1, (200, 2)) + np.array([math.log(1.5), math.log(1 / 1.3)])
    decided, _n = first_decision(Sequential([PRIMARY, SECONDARY], ALPHA, GRID), pairs)
    assert decided is Decision.WORSE


def test_bounds_only_narrow_and_start_as_the_whole_range():
    cs = ConfidenceSequence(0.05, GRID)
    assert cs.interval() == (0.0, 1.0)
    rng = np.random.default_rng(1)
    widths = []
    for x in rng.uniform(0.4, 0.6, 60):
        cs.update(float(x))
        low, high = cs.interval()
        widths.append(high - low)
    assert all(b <= a for a, b in itertools.pairwise(widths))
    assert low < 0.5 < high and widths[-1] < 0.3


def test_pairs_are_oriented_and_clipped():
    judge = Sequential([PRIMARY, SECONDARY], ALPHA, GRID)
    assert judge.log_ratio(PRIMARY, 2.0, 1.0) == pytest.approx(math.log(1.5))      # clipped at 1.5x
    assert judge.log_ratio(SECONDARY, 100.0, 110.0) == pytest.approx(math.log(1.1))  # lower latency: better
    with pytest.raises(ValueError, match="positive"):
        judge.log_ratio(PRIMARY, 0.0, 1.0)


def test_a_margin_the_clip_cannot_show_is_refused():
    with pytest.raises(ValueError, match="margin"):
        Sequential([PRIMARY, Metric("x", True, 0.6)], ALPHA, GRID)
    with pytest.raises(ValueError, match="primary"):
        Sequential([SECONDARY], ALPHA, GRID)
