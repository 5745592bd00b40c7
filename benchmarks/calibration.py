"""Calibration of the ladder judge (refine/stats.py): false verdicts, floor sizes and power, from a pool.

Problem: every verdict threadwise prints (better / worse / within noise) claims a false-verdict
rate: the judge's A/A floor is a high null quantile of the statistic it computes
(stats.FLOOR_QUANTILE, scaled per level), so two identical schedulers should be called
different in at most 5% of comparisons. That claim rests on assumptions (the A/A pairs of a
3-repeat train run describe the noise of every level, pairs cancel the host's drift, a
median of 3 pairs is robust) that only data can check, and the method it replaced (a
bootstrap of a ratio of medians with a noise margin from the A/A CIs) has never been
measured the same way.

Approach: a pool of lab runs (benchmarks/data/lab-pool.duckdb, written by
benchmarks/lab_modes.py: arms `baseline`, `baseline-aa` (the same default scheduler
again) and `exclusive` (a profile with a known effect), many repeats, ABBA order) is
resampled into many small "train" situations, each judged by the real judge:
- A draw picks 2n distinct repeats of the pool without replacement (n = train's repeats):
  the first n are the train A/A run, whose floors are `stats.floors` of the two baseline
  arms on those repeats; the other n, renumbered 1..n in pool order for both arms alike
  (so pairing by repeat holds), are a comparison of `baseline` against `baseline-aa` at
  every level and metric, judged with those floors. Which arm is reference and which
  candidate in the comparison is swapped at random per draw, so a direction bias in the
  pool counts both ways (the floors take the A/A run's arms in train's order: they use
  both signs of every log ratio, so the order only picks stats.null_quantile's resamples).
  The arms are identical: every `better` or `worse` is false. Reported: the rate per
  comparison (over draws and levels), per level, and family-wise (a draw with at least
  one false verdict over a metric's levels, over every metric and level, and a false
  `wins` of the ladder verdict). Also for the same judge without an A/A floor
  (`paired-v2-no-aa-floor`: the own spread alone, what `threadwise ladder` without
  `--aa` judges with), at no extra cost.
- The same draws judge `exclusive` against `baseline` (not swapped): the share of draws
  where the primary metric is called better and the secondary worse, per level (power).
- The old method (schema 1, removed from stats.py) is reimplemented here for the "before"
  figure, at train's n only: per level the ratio of medians candidate/reference with a
  percentile bootstrap 95% CI, each arm's valid samples resampled independently
  (`--n-boot` 2000, bounds with the "lower"/"higher" order statistics; 0/0 = 1, x/0 =
  inf); the noise margin is the largest |bound - 1| over the train A/A draw's
  primary-metric CIs (baseline against baseline-aa, as train ran them; one margin for
  every metric); better when the CI's low bound exceeds 1 + margin, worse when its high
  bound is below 1 - margin (mirrored for a lower-is-better metric); fewer than 2
  samples in an arm: insufficient. A median of k samples resampled with replacement is
  the sample at a random "median rank" (the mean of two for even k); the bootstrap draws those ranks from
  their exact distribution (enumerated over the k^k resamples) instead of drawing k
  indices and sorting: the same resampling distribution, vectorised over the draws.
- Floors: per metric, the median and 90th percentile over draws of the new A/A floor at n
  pairs pooled over levels, and the median of each level's floor (as relative margins,
  expm1 of the log floor), and of the old margin. Before and after pairing, from the whole
  pool: the judge's null quantile (`stats.null_quantile` at stats.FLOOR_QUANTILE) of the
  unpaired A/A log ratios log(b_j / a_i) over every i != j of a level against the paired
  ones (i = j), every pair whatever the host denied, per level and pooled, with the paired
  log ratios' median and 95% quantile of |d| per level, and their signed median and sign
  count: the A/A arms are identical only if the harness treats them alike, and a
  one-sided A/A is a bias that no floor of a noise can absorb. And the host's
  denied-share gap within A/A pairs, against `stats.PAIR_DENIED_MAX` (what the pairs
  beyond a gap look like; not a sweep).
- Speed: the judge is called through the pieces `stats.compare` is made of, each once per
  distinct input: `stats.floors` per train repeats, `stats.pair_up` +
  `stats.null_quantile` (the own spread) per (arms, metric, level, comparison repeats),
  then the interval and `stats.classify` per draw with that draw's floor, exactly as
  `stats.compare` does (tests/refine/test_calibration_smoke.py checks the verdicts against
  `stats.compare` itself). Every quantile uses stats.py's own draws count (stats.DRAWS).
  The old method's floors and verdicts are computed in chunks of draws with numpy.

What this does not say: the pool is one machine's lab (TCG) on one workload, and a few
hundred cells; rates are conditional on it (the Monte Carlo error printed is that of the
draws only, not of the pool: with 10 repeats a level's own spread is itself uncertain, and
pools of truly identical synthetic arms give rates scattered around the nominal one).
Draws overlap (2n of the pool's repeats each), so they are not independent experiments.
Nothing here needs a VM: it re-runs from the committed pool, in about 10 s per run.

    .venv/bin/python benchmarks/calibration.py --write-results
    .venv/bin/python benchmarks/calibration.py --pool FILE --runs 1 --n 3 --draws 500   # a quick look

`--write-results` replaces the `calibration` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import stamp, write_section

from threadwise.refine import stats, store
from threadwise.refine.ladder import AA_ARM, BASELINE
from threadwise.refine.stats import Direction, Measured, Obs, Verdict

POOL = Path(__file__).resolve().parent / "data" / "lab-pool.duckdb"
EFFECT_ARM = "exclusive"
NEW, OWN, OLD = "paired-v2", "paired-v2-no-aa-floor", "old-bootstrap"
METHODS = (NEW, OWN, OLD)
TARGET = 1.0 - stats.QUANTILE  # the judge's nominal false-verdict rate per comparison
# verdict codes in the arrays below
WITHIN, BETTER, WORSE, INSUFFICIENT = 0, 1, -1, 9
CODE = {Verdict.WITHIN_NOISE: WITHIN, Verdict.BETTER: BETTER, Verdict.WORSE: WORSE,
        Verdict.INSUFFICIENT: INSUFFICIENT}
CHUNK = 250  # draws per chunk of the old method's bootstrap (memory: CHUNK x n_boot floats)
DENIED_STEPS = (0.02, 0.05, 0.10, 0.20)


@dataclass(frozen=True)
class Pool:
    """One run of the pool file: its valid cells and design."""

    run_id: int
    label: str
    measured: Measured
    metrics: tuple[tuple[str, Direction], ...]  # primary first
    levels: tuple[int, ...]
    repeats: tuple[int, ...]
    window_s: float = float("nan")
    cells: tuple[int, int] = (0, 0)  # valid, total


@dataclass
class Calibration:
    """The verdicts of `draws` simulated train situations at n repeats (arrays: draw x metric x level)."""

    n: int
    draws: int
    metrics: tuple[tuple[str, Direction], ...]
    levels: tuple[int, ...]
    aa: dict[str, np.ndarray] = field(default_factory=dict)  # method -> A/A verdict codes
    power: dict[str, np.ndarray] = field(default_factory=dict)  # method -> effect-arm verdict codes
    # draw x metric x (level..., pooled): the A/A floor at n pairs, log scale, NaN: not measured
    floor: np.ndarray = field(default_factory=lambda: np.empty(0))
    old_margin: np.ndarray = field(default_factory=lambda: np.empty(0))  # draw, relative
    seconds: float = 0.0

    def false(self, method: str) -> np.ndarray:
        codes = self.aa[method]
        return (codes == BETTER) | (codes == WORSE)

    def judged(self, method: str) -> np.ndarray:
        return self.aa[method] != INSUFFICIENT

    def rate(self, method: str, metric: int, level: int | None = None) -> float:
        """False verdicts per judged comparison of one metric (at one level index, or all levels)."""
        cut = slice(None) if level is None else slice(level, level + 1)
        judged = self.judged(method)[:, metric, cut]
        return float(self.false(method)[:, metric, cut].sum() / max(judged.sum(), 1))

    def rate_error(self, method: str, metric: int) -> float:
        """1.96 x the Monte Carlo standard error of `rate` (draws as the unit, since a draw's levels
        correlate: the ratio estimator's linearised error)."""
        false = self.false(method)[:, metric, :].sum(axis=1)
        judged = self.judged(method)[:, metric, :].sum(axis=1)
        if self.draws < 2 or judged.sum() == 0:
            return math.nan
        residual = false - self.rate(method, metric) * judged
        return float(1.96 * math.sqrt(self.draws / (self.draws - 1) * (residual**2).sum()) / judged.sum())

    def familywise(self, method: str, metric: int | None = None) -> float:
        """Share of draws with a false verdict at some level of `metric` (None: of any metric)."""
        false = self.false(method)
        cut = false if metric is None else false[:, metric : metric + 1, :]
        return float(cut.any(axis=(1, 2)).mean())

    def false_wins(self, method: str) -> float:
        """Share of draws whose A/A ladder verdict is `wins` (primary better somewhere, worse nowhere,
        no secondary worse: stats.ladder_verdict)."""
        return float(wins(self.aa[method]).mean())

    def insufficient(self, method: str) -> int:
        return int((~self.judged(method)).sum())


def wins(codes: np.ndarray) -> np.ndarray:
    """stats.ladder_verdict's `wins` per draw of a draw x metric x level array (metric 0 primary)."""
    primary, secondary = codes[:, 0, :], codes[:, 1:, :]
    return ((primary == BETTER).any(axis=1) & ~(primary == WORSE).any(axis=1)
            & ~(secondary == WORSE).any(axis=(1, 2)))


# ---------------------------------------------------------------------------------------------
# the new judge, in the pieces stats.compare is made of


def cells(measured: Measured, arm: str, level: int, metric: str,
          repeats: Sequence[int]) -> dict[int, Obs]:
    """One arm's cells of a level and metric on `repeats`, renumbered 1.. in the order given."""
    got = measured.get(arm, {}).get(level, {}).get(metric, {})
    return {i: got[r] for i, r in enumerate(repeats, 1) if r in got}


def restrict(measured: Measured, arms: Sequence[str], repeats: Sequence[int]) -> Measured:
    """The arms' cells on `repeats` only, renumbered 1.. (a smaller run of the same design)."""
    return {arm: {level: {metric: cells(measured, arm, level, metric, repeats) for metric in by_metric}
                  for level, by_metric in measured.get(arm, {}).items()} for arm in arms}


def paired(reference: dict[int, Obs], candidate: dict[int, Obs]) -> tuple[float, float, int]:
    """(median paired log ratio, own spread, pairs): what stats.compare computes before the floor."""
    ratios, _ = stats.pair_up(reference, candidate)
    if not ratios:
        return math.nan, math.nan, 0
    estimate = float(np.median(ratios))
    own = (stats.null_quantile([r - estimate for r in ratios], len(ratios))
           if len(ratios) >= stats.MIN_PAIRS else math.nan)
    return estimate, own, len(ratios)


def verdict(estimate: float, own: float, pairs: int, aa_floor: float | None, direction: Direction) -> Verdict:
    """stats.compare's interval and verdict from `paired`'s pieces and the A/A floor."""
    if pairs == 0:
        return Verdict.INSUFFICIENT
    half = max(aa_floor or 0.0, own) if pairs >= stats.MIN_PAIRS else math.nan
    low, high = ((math.exp(estimate - half), math.exp(estimate + half)) if math.isfinite(half)
                 else (math.nan, math.nan))
    return stats.classify(low, high, direction=direction, pairs=pairs)


class Judge:
    """The new judge over one pool, each distinct input computed once."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.names = [m for m, _ in pool.metrics]

    @functools.cache  # noqa: B019 - one Judge per pool and run of the script
    def floors(self, repeats: tuple[int, ...], arm_a: str, arm_b: str, n_max: int) -> stats.Floors:
        part = restrict(self.pool.measured, (arm_a, arm_b), repeats)
        return stats.floors(part, arm_a, arm_b, self.names, n_max=n_max)

    @functools.cache  # noqa: B019
    def paired(self, reference: str, candidate: str, metric: str, level: int,
               repeats: tuple[int, ...]) -> tuple[float, float, int]:
        measured = self.pool.measured
        return paired(cells(measured, reference, level, metric, repeats),
                      cells(measured, candidate, level, metric, repeats))

    def ladder(self, reference: str, candidate: str, repeats: tuple[int, ...],
               floors: stats.Floors) -> np.ndarray:
        """Verdict codes metric x level of candidate against reference on `repeats`."""
        out = np.full((len(self.pool.metrics), len(self.pool.levels)), INSUFFICIENT, dtype=np.int8)
        for i, (metric, direction) in enumerate(self.pool.metrics):
            for j, level in enumerate(self.pool.levels):
                estimate, own, pairs = self.paired(reference, candidate, metric, level, repeats)
                out[i, j] = CODE[verdict(estimate, own, pairs, floors.floor(metric, pairs, level),
                                         direction)]
        return out


# ---------------------------------------------------------------------------------------------
# the old judge (schema 1), vectorised over draws


@functools.cache
def median_ranks(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low rank, high rank, probability) of the median of k draws with replacement from k sorted
    values: the median is the mean of the values at those ranks (equal ranks for odd k)."""
    counts: dict[tuple[int, int], int] = {}
    for draw in itertools.product(range(k), repeat=k):
        ranks = sorted(draw)
        key = (ranks[(k - 1) // 2], ranks[k // 2])
        counts[key] = counts.get(key, 0) + 1
    keys = sorted(counts)
    total = k**k
    return (np.array([a for a, _ in keys]), np.array([b for _, b in keys]),
            np.array([counts[key] / total for key in keys]))


def boot_medians(values: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Bootstrap medians (row x n_boot) of each row's finite values (NaN rows: fewer than 2)."""
    rows = values.shape[0]
    ordered = np.sort(values, axis=1)  # NaN last
    k_row = np.isfinite(values).sum(axis=1)
    out = np.full((rows, n_boot), np.nan)
    for k in np.unique(k_row):
        if k < 2:
            continue
        sel = np.flatnonzero(k_row == k)
        if k <= 6:
            low, high, prob = median_ranks(int(k))
            uniform = rng.random((sel.size, n_boot))
            pick = np.zeros(uniform.shape, dtype=np.intp)
            for edge in np.cumsum(prob)[:-1]:  # inverse CDF over a handful of outcomes
                pick += uniform >= edge
            flat = ordered[sel, : int(k)].ravel()
            start = (np.arange(sel.size) * int(k))[:, None]
            at_low = flat[start + low[pick]]
            out[sel] = at_low if k % 2 else (at_low + flat[start + high[pick]]) / 2
        else:  # plain resampling (pools with many repeats per arm)
            block = ordered[sel, : int(k)]
            idx = rng.integers(0, int(k), size=(sel.size, n_boot, int(k)))
            out[sel] = np.median(np.take_along_axis(block[:, None, :], idx, axis=2), axis=2)
    return out


def ratio(candidate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """candidate / reference with 0/0 = 1 and x/0 = inf (the old stats._ratio)."""
    out = np.ones(np.broadcast(candidate, reference).shape)
    nonzero = reference > 0
    np.divide(candidate, reference, out=out, where=nonzero)
    out[~nonzero & (candidate > 0)] = np.inf
    return out


def old_ci(reference: np.ndarray, candidate: np.ndarray, rng: np.random.Generator,
           n_boot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (draw): the old percentile-bootstrap 95% CI of the ratio of medians, and whether
    both arms had 2 samples or more (else the comparison was `insufficient`, CI NaN)."""
    enough = (np.isfinite(reference).sum(axis=1) >= 2) & (np.isfinite(candidate).sum(axis=1) >= 2)
    low = np.full(reference.shape[0], np.nan)
    high = low.copy()
    if enough.any():
        ratios = ratio(boot_medians(candidate[enough], rng, n_boot),
                       boot_medians(reference[enough], rng, n_boot))
        low[enough] = np.quantile(ratios, 0.025, axis=1, method="lower")
        high[enough] = np.quantile(ratios, 0.975, axis=1, method="higher")
    return low, high, enough


def old_codes(low: np.ndarray, high: np.ndarray, enough: np.ndarray, margin: np.ndarray,
              direction: Direction) -> np.ndarray:
    """The old classify: beyond 1 +- margin on the good side better, on the bad side worse."""
    above, below = low > 1.0 + margin, high < 1.0 - margin
    good, bad = (above, below) if direction == "higher" else (below, above)
    codes = np.where(good, BETTER, np.where(bad, WORSE, WITHIN)).astype(np.int8)
    codes[~enough] = INSUFFICIENT
    return codes


def values(pool: Pool, arm: str) -> np.ndarray:
    """metric x level x repeat (pool order) values of one arm's valid cells, NaN where none."""
    out = np.full((len(pool.metrics), len(pool.levels), len(pool.repeats)), np.nan)
    col = {r: i for i, r in enumerate(pool.repeats)}
    for i, (metric, _) in enumerate(pool.metrics):
        for j, level in enumerate(pool.levels):
            for repeat, obs in pool.measured.get(arm, {}).get(level, {}).get(metric, {}).items():
                if repeat in col:
                    out[i, j, col[repeat]] = obs.value
    return out


def old_judge(pool: Pool, *, train: np.ndarray, comparison: np.ndarray, swap: np.ndarray,
              rng: np.random.Generator, n_boot: int,
              effect: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The old method on every draw: (A/A codes draw x metric x level, margins, effect codes)."""
    base, twin = values(pool, BASELINE), values(pool, AA_ARM)
    other = values(pool, EFFECT_ARM) if effect else None
    draws, shape = train.shape[0], (len(pool.metrics), len(pool.levels))
    aa = np.empty((draws, *shape), dtype=np.int8)
    power = np.empty((draws, *shape), dtype=np.int8) if other is not None else None
    margins = np.empty(draws)
    for start in range(0, draws, CHUNK):
        rows = slice(start, min(start + CHUNK, draws))
        flip = swap[rows, None]
        # the train A/A ladder's primary CIs set the margin of every metric
        bounds = []
        for j in range(len(pool.levels)):
            a, b = base[0, j][train[rows]], twin[0, j][train[rows]]
            low, high, enough = old_ci(a, b, rng, n_boot)
            bounds += [np.where(enough, np.abs(low - 1), np.nan), np.where(enough, np.abs(high - 1), np.nan)]
        stacked = np.stack(bounds, axis=1)
        stacked[~np.isfinite(stacked)] = -np.inf
        noise = np.maximum(stacked.max(axis=1), 0.0)
        margins[rows] = noise
        for i, (_, direction) in enumerate(pool.metrics):
            for j in range(len(pool.levels)):
                a, b = base[i, j][comparison[rows]], twin[i, j][comparison[rows]]
                low, high, enough = old_ci(np.where(flip, b, a), np.where(flip, a, b), rng, n_boot)
                aa[rows, i, j] = old_codes(low, high, enough, noise, direction)
                if power is not None and other is not None:
                    c = other[i, j][comparison[rows]]
                    low, high, enough = old_ci(a, c, rng, n_boot)
                    power[rows, i, j] = old_codes(low, high, enough, noise, direction)
    return aa, margins, power


# ---------------------------------------------------------------------------------------------
# the simulation


def calibrate(pool: Pool, *, n: int, draws: int, seed: int, n_boot: int = 2000,
              old: bool = True) -> Calibration:
    """`draws` simulated train situations of n repeats from the pool (see the module's note)."""
    if 2 * n > len(pool.repeats):
        raise ValueError(f"n={n} needs {2 * n} repeats, the pool has {len(pool.repeats)}")
    started = time.monotonic()
    rng = np.random.default_rng([seed, n])
    order = np.argsort(rng.random((draws, len(pool.repeats))), axis=1)[:, : 2 * n]
    train, comparison = np.sort(order[:, :n], axis=1), np.sort(order[:, n:], axis=1)
    swap = rng.random(draws) < 0.5
    effect = EFFECT_ARM in pool.measured
    judge = Judge(pool)
    shape = (draws, len(pool.metrics), len(pool.levels))
    result = Calibration(n, draws, pool.metrics, pool.levels)
    result.aa[NEW] = np.empty(shape, dtype=np.int8)
    result.aa[OWN] = np.empty(shape, dtype=np.int8)
    result.floor = np.full((draws, len(pool.metrics), len(pool.levels) + 1), np.nan)
    if effect:
        result.power[NEW] = np.empty(shape, dtype=np.int8)
    repeats = np.asarray(pool.repeats)
    for d in range(draws):
        train_reps = tuple(int(r) for r in repeats[train[d]])
        comp_reps = tuple(int(r) for r in repeats[comparison[d]])
        floors = judge.floors(train_reps, BASELINE, AA_ARM, n)
        reference, candidate = (AA_ARM, BASELINE) if swap[d] else (BASELINE, AA_ARM)
        for i, (metric, _) in enumerate(pool.metrics):
            for j, level in enumerate((*pool.levels, None)):  # each level's, then the pooled floor
                value = floors.floor(metric, n, level)
                result.floor[d, i, j] = math.nan if value is None else value
        result.aa[NEW][d] = judge.ladder(reference, candidate, comp_reps, floors)
        result.aa[OWN][d] = judge.ladder(reference, candidate, comp_reps, stats.NO_FLOORS)
        if effect:
            result.power[NEW][d] = judge.ladder(BASELINE, EFFECT_ARM, comp_reps, floors)
    if old:
        boot_rng = np.random.default_rng([seed, n, 1])
        aa, margins, power = old_judge(pool, train=train, comparison=comparison, swap=swap, rng=boot_rng,
                                       n_boot=n_boot, effect=effect)
        result.aa[OLD], result.old_margin = aa, margins
        if power is not None:
            result.power[OLD] = power
    result.seconds = time.monotonic() - started
    return result


# ---------------------------------------------------------------------------------------------
# the pool's own spread: pairing, levels, host denial


@dataclass(frozen=True)
class SpreadRow:
    metric: str
    level: int | None  # None: pooled over levels
    pairs: int
    cross: int
    abs_median: float  # of |paired log ratio|
    abs_q95: float
    floor_paired: float  # null quantile at n pairs, log scale
    floor_unpaired: float
    median: float = math.nan  # of the signed paired log ratio baseline-aa / baseline
    below: int = 0  # pairs with baseline-aa below baseline


def aa_ratios(pool: Pool, metric: str, level: int) -> tuple[list[float], list[float]]:
    """Paired (i = j) and unpaired (every i != j) A/A log ratios of one level, every cell
    whatever the host denied it, so that pairing is the only difference."""
    a = pool.measured.get(BASELINE, {}).get(level, {}).get(metric, {})
    b = pool.measured.get(AA_ARM, {}).get(level, {}).get(metric, {})
    same = [stats.log_ratio(b[r].value, a[r].value) for r in sorted(set(a) & set(b))]
    cross = [stats.log_ratio(b[j].value, a[i].value) for i in sorted(a) for j in sorted(b) if i != j]
    return same, cross


def spread(pool: Pool, n: int) -> list[SpreadRow]:
    rows = []
    for metric, _ in pool.metrics:
        every_same: list[float] = []
        every_cross: list[float] = []
        for level in (*pool.levels, None):
            if level is None:
                same, cross = every_same, every_cross
            else:
                same, cross = aa_ratios(pool, metric, level)
                every_same += same
                every_cross += cross
            magnitude = np.abs(same)
            rows.append(SpreadRow(
                metric, level, len(same), len(cross),
                float(np.median(magnitude)) if same else math.nan,
                float(np.quantile(magnitude, 0.95, method="higher")) if same else math.nan,
                stats.null_quantile(same, n, quantile=stats.FLOOR_QUANTILE),
                stats.null_quantile(cross, n, quantile=stats.FLOOR_QUANTILE),
                float(np.median(same)) if same else math.nan, int(sum(d < 0 for d in same))))
    return rows


def denied_gaps(pool: Pool) -> list[tuple[float, int, float, float]] | None:
    """Per threshold: A/A pairs beyond it, median |log ratio| of the primary beyond and within it
    (None: the pool has no denied shares)."""
    metric = pool.metrics[0][0]
    gaps, magnitudes = [], []
    for level in pool.levels:
        a = pool.measured.get(BASELINE, {}).get(level, {}).get(metric, {})
        b = pool.measured.get(AA_ARM, {}).get(level, {}).get(metric, {})
        for r in sorted(set(a) & set(b)):
            if a[r].denied is None or b[r].denied is None:
                continue
            gaps.append(abs(a[r].denied - b[r].denied))
            magnitudes.append(abs(stats.log_ratio(b[r].value, a[r].value)))
    if not gaps:
        return None
    gap, size = np.array(gaps), np.array(magnitudes)
    out = []
    for limit in DENIED_STEPS:
        beyond = gap > limit
        out.append((limit, int(beyond.sum()),
                     float(np.median(size[beyond])) if beyond.any() else math.nan,
                     float(np.median(size[~beyond])) if (~beyond).any() else math.nan))
    return out


# ---------------------------------------------------------------------------------------------
# reading the pool, printing


def load_pools(path: Path, runs: Sequence[int] | None) -> tuple[list[Pool], list[str]]:
    """The pool file's completed runs with the three arms' design (notes: runs left out, and why)."""
    con = store.open_ladder(path, read_only=True)
    pools, notes = [], []
    try:
        rows = con.execute("SELECT run_id, purpose, repeats, window_s, completed FROM run "
                           "ORDER BY run_id").fetchall()
        for run_id, purpose, repeats, window_s, completed in rows:
            if runs is not None and run_id not in runs:
                continue
            if not completed:
                notes.append(f"run {run_id} ({purpose}) left out: not completed")
                continue
            measured = store.measured(con, run_id)
            if BASELINE not in measured or AA_ARM not in measured:
                notes.append(f"run {run_id} ({purpose}) left out: no {BASELINE} and {AA_ARM} arms")
                continue
            info = store.run_info(con, run_id)
            valid, total = con.execute(store.sql("cell_counts"), [run_id]).fetchone()
            pools.append(Pool(run_id, purpose, measured,
                              ((info.primary[0], info.primary[1]), *info.secondary),  # type: ignore[arg-type]
                              tuple(info.levels), tuple(range(1, int(repeats) + 1)), float(window_s),
                              (int(valid), int(total))))
    finally:
        con.close()
    return pools, notes


def pct(value: float, digits: int = 1) -> str:
    return "-" if not math.isfinite(value) else f"{value * 100:.{digits}f}%"


def margin(log_value: float) -> str:
    return "-" if not math.isfinite(log_value) else f"+-{math.expm1(log_value) * 100:.1f}%"


def render(pool: Pool, results: dict[int, Calibration], main_n: int, rows: list[SpreadRow],
           gaps: list[tuple[float, int, float, float]] | None) -> list[str]:
    """The run's markdown: rate lines, false verdicts, floors, pairing, host denial, power."""
    main = results[main_n]
    lines = [f"### Run {pool.run_id}: {pool.label}", "",
             f"{len(pool.repeats)} repeats x levels {', '.join(map(str, pool.levels))}, "
             f"{pool.window_s:g} s windows; {pool.cells[0]} of {pool.cells[1]} cells valid; "
             f"{main.draws} draws per n.", ""]
    lines += [f"A/A false verdict rate: {pct(main.rate(method, i))} per comparison "
              f"({metric}, n={main_n}, {method})"
              for method in METHODS if method in main.aa for i, (metric, _) in enumerate(pool.metrics)]
    lines += ["", *false_table(pool, results), "", *floor_table(pool, results), "",
              *pairing_table(rows, main_n), "", *denied_table(pool, gaps)]
    if main.power:
        lines += ["", *power_table(pool, results)]
    timing = ", ".join(f"n={n} {result.seconds:.1f} s" for n, result in sorted(results.items()))
    lines += ["", f"Time: {timing}."]
    return lines


def false_table(pool: Pool, results: dict[int, Calibration]) -> list[str]:
    levels = " / ".join(f"bg{level}" for level in pool.levels)
    lines = [f"False verdicts between the identical arms (target: at most {pct(TARGET, 0)} per comparison; "
             "rates per judged comparison, `insufficient` ones left out; +- is the draws' 95% Monte Carlo "
             f"error; `{OWN}`: the same judge without an A/A floor, as `threadwise ladder` without `--aa` "
             "judges):", "",
             f"| method | n | metric | per comparison | by level ({levels}) | any level | target |",
             "|---|---:|---|---:|---|---:|---|"]
    for method in METHODS:
        for n, result in sorted(results.items()):
            if method not in result.aa:
                continue
            for i, (metric, _) in enumerate(pool.metrics):
                rate = result.rate(method, i)
                by_level = " / ".join(pct(result.rate(method, i, j), 0) for j in range(len(pool.levels)))
                error = pct(result.rate_error(method, i))
                lines.append(f"| {method} | {n} | {metric} | {pct(rate)} +- {error} "
                             f"| {by_level} | {pct(result.familywise(method, i))} "
                             f"| {'met' if rate <= TARGET else 'NOT met'} |")
    lines += ["", "Family-wise, over every metric and level of a draw (what a ladder verdict sees):", "",
              "| method | n | any false verdict | false `wins` (ladder verdict) | insufficient comparisons |",
              "|---|---:|---:|---:|---:|"]
    lines += [f"| {method} | {n} | {pct(result.familywise(method))} | {pct(result.false_wins(method))} "
              f"| {result.insufficient(method)} |"
              for method in METHODS for n, result in sorted(results.items()) if method in result.aa]
    return lines


def floor_table(pool: Pool, results: dict[int, Calibration]) -> list[str]:
    levels = " / ".join(f"bg{level}" for level in pool.levels)
    lines = [f"{NEW} A/A floor at n pairs over draws, the margin a verdict must clear: pooled over "
             f"levels (median, 90th percentile) and each level's (median); `{OLD}`: its one margin for "
             "every metric.",
             "", f"| n | metric | pooled | by level ({levels}) | {OLD} |", "|---:|---|---|---|---|"]
    for n, result in sorted(results.items()):
        old = result.old_margin
        old_cell = (f"+-{pct(float(np.median(old)))} (+-{pct(float(np.quantile(old, 0.9)))})"
                    if old.size else "-")
        for i, (metric, _) in enumerate(pool.metrics):
            pooled = result.floor[:, i, -1]
            if not np.isfinite(pooled).any():
                lines.append(f"| {n} | {metric} | not measured | - | {old_cell} |")
                continue
            by_level = " / ".join(margin(float(np.nanmedian(result.floor[:, i, j])))
                                  if np.isfinite(result.floor[:, i, j]).any() else "-"
                                  for j in range(len(pool.levels)))
            lines.append(f"| {n} | {metric} | {margin(float(np.nanmedian(pooled)))} "
                         f"({margin(float(np.nanquantile(pooled, 0.9)))}) | {by_level} | {old_cell} |")
    return lines


def pairing_table(rows: list[SpreadRow], n: int) -> list[str]:
    quantile = f"q{stats.FLOOR_QUANTILE * 100:.0f}"
    lines = [f"Before and after pairing, whole pool: the judge's null floor ({quantile}) at n={n} from "
             "unpaired A/A log ratios (every i != j of a level) and from paired ones (i = j), every "
             "pair whatever the host denied; the paired abs(log ratio) d per level (as relative "
             "margins); and whether the identical arms differ in one direction: exp(median d) of "
             f"`{AA_ARM}` / `{BASELINE}` and the pairs with d < 0 (about half under no effect).", "",
             "| metric | bg | pairs | median abs(d) | q95 abs(d) | floor unpaired | floor paired "
             "| aa/baseline | d < 0 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {row.metric} | {'all' if row.level is None else row.level} | {row.pairs} "
              f"| {margin(row.abs_median)} | {margin(row.abs_q95)} | {margin(row.floor_unpaired)} "
              f"| {margin(row.floor_paired)} | {math.exp(row.median):.3f} | {row.below}/{row.pairs} |"
              for row in rows]
    return lines


def denied_table(pool: Pool, gaps: list[tuple[float, int, float, float]] | None) -> list[str]:
    if gaps is None:
        return ["Host denied share: not sampled in this run."]
    lines = [f"Host denied-share gap within the pool's A/A pairs ({pool.metrics[0][0]}; the judge leaves out "
             f"pairs beyond {stats.PAIR_DENIED_MAX:g}):", "",
             "| gap beyond | pairs | median abs(d) beyond | median abs(d) within |", "|---:|---:|---:|---:|"]
    lines += [f"| {limit:g} | {count} | {margin(beyond)} | {margin(within)} |"
              for limit, count, beyond, within in gaps]
    return lines


def power_table(pool: Pool, results: dict[int, Calibration]) -> list[str]:
    called = ["better" if i == 0 else "worse" for i in range(len(pool.metrics))]
    lines = [f"Power on a known effect: `{EFFECT_ARM}` against `{BASELINE}` on the same draws (floors from "
             "each draw's A/A repeats): the share of draws with the primary called better and the secondary "
             "worse; pool effect = exp(median paired log ratio) over every repeat.", "",
             "| n | bg | " + " | ".join(f"{metric}: pool effect | {word} {NEW} | {word} {OLD}"
                                       for (metric, _), word in zip(pool.metrics, called, strict=True))
             + " |",
             "|---:|---:|" + "---:|---:|---:|" * len(pool.metrics)]
    for n, result in sorted(results.items()):
        for j, level in enumerate(pool.levels):
            row = [str(n), str(level)]
            for i, (metric, _) in enumerate(pool.metrics):
                ratios, _ = stats.pair_up(pool.measured[BASELINE].get(level, {}).get(metric, {}),
                                          pool.measured[EFFECT_ARM].get(level, {}).get(metric, {}))
                row.append(f"{math.exp(float(np.median(ratios))):.2f}x" if ratios else "-")
                wanted = BETTER if i == 0 else WORSE
                row += [pct(float((result.power[method][:, i, j] == wanted).mean()), 0)
                        if method in result.power else "-" for method in (NEW, OLD)]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Ladder `wins` of the effect arm: " + ", ".join(
        f"n={n} {method} {pct(float(wins(result.power[method]).mean()), 0)}"
        for n, result in sorted(results.items()) for method in (NEW, OLD) if method in result.power) + "."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", type=Path, default=POOL, help="the pool's ladder file")
    parser.add_argument("--runs", default=None, help="comma-separated run ids (default: every completed run)")
    parser.add_argument("--n", type=int, default=3, help="train's repeats (pairs per comparison)")
    parser.add_argument("--also-n", default="2,4", help="further n, where the pool has 2n repeats")
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--n-boot", type=int, default=2000, help="the old method's bootstrap resamples")
    parser.add_argument("--write-results", action="store_true", help="write benchmarks/RESULTS.md")
    args = parser.parse_args()
    header = stamp(".venv/bin/python benchmarks/calibration.py " + " ".join(sys.argv[1:]))
    runs = None if args.runs is None else [int(v) for v in args.runs.split(",")]
    pools, notes = load_pools(args.pool, runs)
    try:
        shown = args.pool.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = args.pool
    lines = [f"Pool: `{shown}`; the judge: `{stats.METHOD}`.",
             "Each draw: 2n distinct repeats of a run; n of them are the train A/A run (its floors), "
             f"the other n a comparison of `{BASELINE}` against `{AA_ARM}` (identical: every better or "
             "worse is false) and of `exclusive` against `baseline` (power); reference and candidate "
             f"swapped at random per draw; seed {args.seed}.", ""]
    lines += [f"{note}." for note in notes] + ([""] if notes else [])
    for pool in pools:
        wanted = [args.n, *(int(v) for v in args.also_n.split(",") if v)]
        ns = sorted({n for n in wanted if 2 * n <= len(pool.repeats) and n >= 1})
        if args.n not in ns:
            lines += [f"### Run {pool.run_id}: {pool.label}", "",
                      f"Left out: n={args.n} needs {2 * args.n} repeats, it has {len(pool.repeats)}.", ""]
            continue
        results = {n: calibrate(pool, n=n, draws=args.draws, seed=args.seed, n_boot=args.n_boot,
                                old=n == args.n) for n in ns}
        lines += [*render(pool, results, args.n, spread(pool, args.n), denied_gaps(pool)), ""]
    if not pools:
        lines.append("No completed run with both baseline arms in the pool.")
    print("\n".join(lines))
    if args.write_results:
        body = "\n".join(["## Calibration of the ladder judge (A/A false verdicts, floors, power)", "",
                          header, *lines])
        print(f"wrote {write_section('calibration', body)}")


if __name__ == "__main__":
    main()
