"""The judge of a ladder: paired ratios, per-metric A/A floors, verdicts, the keep rule.

Problem: a ladder gives, per arm, level and metric, three or so windows from a
machine whose noise is as large as many effects (the lab's A/A spread was
+-50% on a busy host). Schema 1 judged each level by a percentile bootstrap of
a ratio of medians with the arms resampled independently: at 3 samples per arm
that "interval" is just [min/max, max/min], its coverage unknown, and one
outlier cell set the noise floor of every metric. The verdicts must be valid
at the sample sizes the lab affords, and one function must give every verdict
that a report, the README, `threadwise ladder` and the refine loop show.

Approach (docs/refine.md "Statistics", calibrated by benchmarks/calibration.py):
- **Pairs.** Arms alternate in ABBA order and every arm runs each level once
  per repeat, so the reference's and the candidate's cells of one level and
  repeat ran seconds apart; their ratio cancels the host's slow drift. A
  comparison uses the pairs whose two cells are both valid, and leaves out a
  pair whose cells the host denied unequally (their shares of vCPU time the
  host did not serve differ by more than PAIR_DENIED_MAX: runtime/lab/hostload.py).
- **Estimate.** d_r = log(candidate_r / reference_r) per pair; the effect is
  exp(median d_r). A median, so one disturbed pair does not move it.
- **Floor (per metric and level).** From an A/A run (the reference scheduler
  against itself): the paired log ratios, taken with both signs (the arms are
  exchangeable, so the null is symmetric), are the null distribution of one
  pair. The pooled floor for a comparison of n pairs is the FLOOR_QUANTILE (99%)
  quantile of |median of n draws| from every level's ratios: the comparison's
  own statistic under "no effect" at its n (resampled with a seed derived from
  the data, so the same numbers give the same floor and verdict wherever they
  are judged). Levels differ tenfold in spread for a latency p99, so a level's
  floor is its scale (median |log ratio|, never below the pool's) times the same
  quantile of the ratios standardised by their levels' scales.
  An outlier pair is one value among 2 x levels x repeats and moves a median of
  n draws only when drawn more than n/2 times, and it cannot move its level's
  median |log ratio| of three, so it cannot set a floor. 99% rather than 95%,
  because the floor is itself estimated from few A/A pairs: the measured
  false-verdict rate is what must stay at 5% (benchmarks/calibration.py). The
  floor keeps the A/A pairs the host disturbed, which comparisons leave out:
  the filter catches the worst pairs, but pairs inside the gap still carry the
  load (bursty host: median |d| 14.7% against 2.4% quiet), and without them
  the loaded pool's identical arms read better or worse 12-17% of the time.
- **Own spread.** The same quantile from the comparison's own pairs, centred
  on their median: a candidate much noisier than the A/A arms widens its own
  interval instead of borrowing the baseline's calm.
- **Interval and verdict.** half-width = max(A/A floor, own spread); the
  interval is exp(median d +- half-width). `better` when it lies wholly on the
  objective's good side of 1, `worse` when wholly on the bad side, else
  `within_noise`; fewer than MIN_PAIRS pairs: `insufficient`.
- **Ladder verdict against the default scheduler** (`ladder_verdict`): wins
  when the primary is better at one level or more and worse at none, and no
  secondary is worse anywhere.
- **Keep rule against the current best** (`pareto_verdict`): kept when no
  objective metric is worse at any level and at least one metric is better
  at some level: a change that fixes a secondary while the primary holds is
  a win; a primary gain that costs a secondary is not.
- **Trade rule** (`keep_decision`, when the Pareto rule reverts): a candidate
  is kept anyway when, against the default scheduler in the same ladder, it
  has no loss (metric and level judged `worse`) the best did not have, is
  judged better than the best on one of the best's losses (against the best:
  a loss that merely reads within noise of the default is no progress),
  is worse than the best only where it still does not lose to the default (it
  gives back only part of a win), and keeps the primary better somewhere if
  the best's was. The goal
  is a profile that loses to the default nowhere; a change that removes a loss
  while giving back part of a win (rolesim: worker p99 at bg=0 from 12x worse
  to 1.7x, at the price of a p99 gain under background) is a step toward it
  that the Pareto rule against the best alone would revert.
- Zero and negative values: metrics are rates and latencies, so a negative or
  non-finite sample is an error. 0/0 is a ratio of 1, x/0 and 0/x are clipped
  to 1e6 and 1e-6 (beyond any floor) so that every log ratio stays finite.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import numpy as np

Direction = Literal["higher", "lower"]

MIN_PAIRS = 2
MIN_AA_PAIRS = 4  # fewer A/A pairs than this: the floor is "not measured"
QUANTILE = 0.95  # the own spread's null quantile
# The A/A floor's null quantile. Nominally 99%, because the floor is itself estimated from a
# handful of A/A pairs; what must hold is the MEASURED false-verdict rate, at most 5% per
# comparison at train's 3 repeats: 0.5-1.0% on the quiet pool and 0.1-0.8% on the bursty one
# (benchmarks/calibration.py, RESULTS.md "calibration"). An exploratory run at 95% read about
# 10% false for rolesim's worker p99 at bg=0 and bg=4 on the quiet pool.
FLOOR_QUANTILE = 0.99
DRAWS = 20000  # resamples per quantile (seeded; the quantile's own error ~ 0.3%)
# A pair whose two cells the host denied shares of vCPU time differing by more than this is
# left out of a comparison (hostload.py). Set from the first pool (docs/lab.md "Host
# interference"): every A/A pair off by more than 30% had a gap above 0.16, undisturbed pairs
# sat within 0.03 of each other. Not swept: under bursty load, pairs with gaps of 0.02-0.1 are
# already noisier (calibration: median |d| 29% beyond 0.02, 6.9% within), which is why the
# floors keep every pair.
PAIR_DENIED_MAX = 0.10
LOG_CLIP = math.log(1e6)
DIRECTIONS: tuple[Direction, ...] = ("higher", "lower")
METHOD = ("paired-v2: median of paired log ratios +- max(A/A floor: null q99 at n, pooled and "
          "per level; own spread: null q95 at n)")


@dataclass(frozen=True)
class Obs:
    """One valid cell's value of a metric, with the share of vCPU time the host denied it."""

    value: float
    denied: float | None = None


# arm -> background level -> metric -> repeat -> the valid cell's observation
Measured = dict[str, dict[int, dict[str, dict[int, Obs]]]]


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    WITHIN_NOISE = "within_noise"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class Floors:
    """Per-metric A/A floors on the log-ratio scale: metric -> pairs n -> floor.

    `aa_pairs` is how many A/A pairs each metric's floor rests on; a metric
    missing from `by_metric` was not measured (too few A/A pairs, or no A/A).
    """

    by_metric: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    aa_pairs: Mapping[str, int] = field(default_factory=dict)
    run_id: int | None = None
    method: str = "none"
    # metric -> level -> n -> floor, where the A/A run measured that level (else by_metric's)
    by_level: Mapping[str, Mapping[int, Mapping[int, float]]] = field(default_factory=dict)

    def floor(self, metric: str, n: int, level: int | None = None) -> float | None:
        """The floor at n pairs: the level's own where measured, else the pooled one."""
        table = self.by_level.get(metric, {}).get(level) if level is not None else None
        table = table or self.by_metric.get(metric)
        if not table or n < 1:
            return None
        return table[min(n, max(table))]

    def margin(self, metric: str, n: int) -> str:
        """`+-12.3%` (the floor at n pairs; `bg=0 +-3.1%, bg=1 +-12.3%` per level where
        measured), or `not measured` (never 0)."""
        value = self.floor(metric, n)
        if value is None:
            return "not measured"
        levels = self.by_level.get(metric, {})
        if not levels:
            return f"+-{math.expm1(value):.1%}"
        return ", ".join(f"bg={level} +-{math.expm1(self.floor(metric, n, level) or value):.1%}"
                         for level in sorted(levels))

    def describe(self, metric: str, n: int) -> str:
        if self.floor(metric, n) is None:
            return f"{metric}: floor not measured"
        return (f"{metric}: {self.margin(metric, n)} at {n} pairs "
                f"(from {self.aa_pairs.get(metric, 0)} A/A pairs)")


NO_FLOORS = Floors()


@dataclass(frozen=True)
class Comparison:
    """One level and metric: candidate against reference, paired.

    `ratio` = exp(median paired log ratio); `ci_low`/`ci_high` its interval
    (NaN when insufficient); `floor` the half-width used (log scale), the larger
    of `aa_floor` (None: not measured) and `own_spread`. `reference_median` and
    `candidate_median` are medians of each arm's valid cells (shown beside the ratio).
    """

    level: int
    metric: str
    direction: Direction
    reference_median: float
    candidate_median: float
    ratio: float
    ci_low: float
    ci_high: float
    n_reference: int
    n_candidate: int
    verdict: Verdict
    pairs: int = 0
    pairs_disturbed: int = 0
    floor: float = float("nan")
    aa_floor: float | None = None
    own_spread: float = float("nan")

    def describe(self) -> str:
        """E.g. `bg=8 1.12 [1.05, 1.19]`."""
        if self.verdict is Verdict.INSUFFICIENT:
            return f"bg={self.level} ({self.pairs} valid pairs)"
        return f"bg={self.level} {self.ratio:.3g} [{self.ci_low:.3g}, {self.ci_high:.3g}]"


@dataclass(frozen=True)
class LadderComparison:
    """A candidate arm against a reference arm over the whole ladder.

    `primary` one Comparison per level of the primary metric, `secondary` one per
    level of each secondary metric (metric-major); `wins`/`reason` are
    `ladder_verdict` (against the default scheduler) and `keep`/`keep_reason`
    `pareto_verdict` (the refine loop's rule against the current best).
    """

    reference: str
    candidate: str
    primary: tuple[Comparison, ...]
    secondary: tuple[Comparison, ...]
    floors: Floors
    wins: bool
    reason: str
    keep: bool = False
    keep_reason: str = ""

    def comparisons(self, metric: str) -> tuple[Comparison, ...]:
        return tuple(c for c in (*self.primary, *self.secondary) if c.metric == metric)


def _check(values: Iterable[float], what: str) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: samples must be finite, got {array[~np.isfinite(array)][:3]}")
    if np.any(array < 0):
        raise ValueError(f"{what}: negative samples {array[array < 0][:3]}; a ratio needs a "
                         "non-negative metric (a rate or a latency)")
    return array


def log_ratio(candidate: float, reference: float) -> float:
    """log(candidate / reference) with 0/0 = 0 and a zero on one side clipped to +-LOG_CLIP."""
    if reference <= 0 and candidate <= 0:
        return 0.0
    if reference <= 0:
        return LOG_CLIP
    if candidate <= 0:
        return -LOG_CLIP
    return float(np.clip(math.log(candidate / reference), -LOG_CLIP, LOG_CLIP))


def data_seed(values: np.ndarray, n: int) -> list[int]:
    """A resampling seed derived from the data itself (values to 1e-9, sorted, and n): the same
    numbers give the same quantile wherever they are judged, with no seed to carry around."""
    canonical = np.round(np.sort(values), 9).tobytes()
    return [zlib.crc32(canonical), n, values.size]


def null_quantile(null: Sequence[float], n: int, *, quantile: float = QUANTILE,
                  draws: int = DRAWS) -> float:
    """The `quantile` of |median of n draws| from `null` taken with both signs (seeded by the data)."""
    values = np.asarray(list(null), dtype=float)
    if values.size == 0 or n < 1:
        return float("nan")
    symmetric = np.sort(np.concatenate([values, -values]))  # sorted: the input's order must not matter
    rng = np.random.default_rng(data_seed(symmetric, n))
    medians = np.median(symmetric[rng.integers(0, symmetric.size, (draws, n))], axis=1)
    return float(np.quantile(np.abs(medians), quantile, method="higher"))


def _denied_apart(a: Obs, b: Obs) -> bool:
    return a.denied is not None and b.denied is not None and abs(a.denied - b.denied) > PAIR_DENIED_MAX


def pair_up(reference: Mapping[int, Obs], candidate: Mapping[int, Obs], *,
            keep_disturbed: bool = False) -> tuple[list[float], int]:
    """Paired log ratios of the repeats both arms have, and how many pairs host load disturbed
    (left out, unless `keep_disturbed`)."""
    ratios, disturbed = [], 0
    for repeat in sorted(set(reference) & set(candidate)):
        ref, cand = reference[repeat], candidate[repeat]
        if _denied_apart(ref, cand) and not keep_disturbed:
            disturbed += 1
            continue
        ratios.append(log_ratio(cand.value, ref.value))
    return ratios, disturbed


def classify(low: float, high: float, *, direction: Direction, pairs: int) -> Verdict:
    """The verdict of a ratio interval in the objective's direction."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if pairs < MIN_PAIRS:
        return Verdict.INSUFFICIENT
    above, below = low > 1.0, high < 1.0
    if direction == "higher":
        return Verdict.BETTER if above else Verdict.WORSE if below else Verdict.WITHIN_NOISE
    return Verdict.BETTER if below else Verdict.WORSE if above else Verdict.WITHIN_NOISE


def compare(reference: Mapping[int, Obs], candidate: Mapping[int, Obs], *, level: int, metric: str,
            direction: Direction, aa_floor: float | None) -> Comparison:
    """One level and metric: paired ratio, interval and verdict (see the module's note)."""
    ref_values = _check((o.value for o in reference.values()), f"{metric} at bg={level}, reference")
    cand_values = _check((o.value for o in candidate.values()), f"{metric} at bg={level}, candidate")
    ref_median = float(np.median(ref_values)) if ref_values.size else float("nan")
    cand_median = float(np.median(cand_values)) if cand_values.size else float("nan")
    ratios, disturbed = pair_up(reference, candidate)
    nan = float("nan")
    if not ratios:
        return Comparison(level, metric, direction, ref_median, cand_median, nan, nan, nan,
                          int(ref_values.size), int(cand_values.size), Verdict.INSUFFICIENT, 0,
                          disturbed, nan, aa_floor, nan)
    estimate = float(np.median(ratios))
    centred = [r - estimate for r in ratios]
    own = null_quantile(centred, len(ratios)) if len(ratios) >= MIN_PAIRS else nan
    half = max(aa_floor or 0.0, own) if len(ratios) >= MIN_PAIRS else nan
    low, high = (math.exp(estimate - half), math.exp(estimate + half)) if math.isfinite(half) else (nan, nan)
    verdict = classify(low, high, direction=direction, pairs=len(ratios))
    return Comparison(level, metric, direction, ref_median, cand_median, math.exp(estimate), low, high,
                      int(ref_values.size), int(cand_values.size), verdict, len(ratios), disturbed,
                      half, aa_floor, own)


def aa_pairs(measured: Measured, arm_a: str, arm_b: str, metric: str, *,
             keep_disturbed: bool = False) -> tuple[list[float], int]:
    """Every level's paired log ratios of two identical arms, and the disturbed pairs left out."""
    ratios, disturbed = [], 0
    a, b = measured.get(arm_a, {}), measured.get(arm_b, {})
    for level in sorted(set(a) | set(b)):
        got, left = pair_up(a.get(level, {}).get(metric, {}), b.get(level, {}).get(metric, {}),
                            keep_disturbed=keep_disturbed)
        ratios += got
        disturbed += left
    return ratios, disturbed


def floors(measured: Measured, arm_a: str, arm_b: str, metrics: Sequence[str], *,
           n_max: int = 8, run_id: int | None = None) -> Floors:
    """Per-metric (and per-level) floors for comparisons of 1..n_max pairs from an A/A run.

    Pooled: the FLOOR_QUANTILE null quantile of every level's paired log ratios. Per level:
    each ratio is divided by its level's scale (the median |log ratio| of the level's pairs,
    never below the pool's), the same quantile of those standardised ratios is the shape, and
    a level's floor is its scale times the shape (a level no louder than the pool's keeps at
    least the pooled floor). Measured on the quiet pool, the levels' A/A spread differs
    tenfold for a latency p99 (bg=0 +-45%, bg=2 +-1%), which one pooled floor cannot
    describe. A median of three cannot be set by one outlier pair. Without the pool's scale
    as its lower bound, a level whose pairs agreed to 0.1% blew the shape up; scaling the
    pooled floor by scale ratios instead counted a loud level's tail twice (+-14,000% for the
    worker p99 at bg=0, benchmarks/calibration.py run at the time)."""
    by_metric: dict[str, dict[int, float]] = {}
    by_level: dict[str, dict[int, dict[int, float]]] = {}
    counts: dict[str, int] = {}
    shared = sorted(set(measured.get(arm_a, {})) & set(measured.get(arm_b, {})))
    for metric in metrics:
        levels = {level: pair_up(measured[arm_a][level].get(metric, {}),
                                 measured[arm_b][level].get(metric, {}), keep_disturbed=True)[0]
                  for level in shared}
        ratios = [x for d in levels.values() for x in d]
        counts[metric] = len(ratios)
        if len(ratios) < MIN_AA_PAIRS:
            continue
        pooled = {n: null_quantile(ratios, n, quantile=FLOOR_QUANTILE) for n in range(1, n_max + 1)}
        by_metric[metric] = pooled
        overall = float(np.median(np.abs(ratios)))
        # each level's scale, never below the pool's (a level whose three pairs agree by chance)
        scales = {level: max(float(np.median(np.abs(d))), overall)
                  for level, d in levels.items() if len(d) >= MIN_PAIRS}
        standard = [x / scales[level] for level, d in levels.items() if level in scales for x in d]
        if overall <= 0 or not standard:
            continue
        shape = {n: null_quantile(standard, n, quantile=FLOOR_QUANTILE) for n in pooled}
        by_level[metric] = {level: {n: max(pooled[n] if scale <= overall else 0.0, scale * shape[n])
                                    for n in pooled}
                            for level, scale in scales.items()}
    return Floors(by_metric, counts, run_id,
                  f"null q{FLOOR_QUANTILE * 100:.0f} of the median of n paired A/A log ratios (both signs), "
                  "pooled over levels; per level: its scale (median |log ratio|, at least the pool's) x "
                  "the same quantile of the ratios standardised by their levels' scales",
                  by_level)


def _levels(names: Iterable[str]) -> str:
    return ", ".join(names)


def ladder_verdict(primary: Sequence[Comparison],
                   secondary: Sequence[Comparison] = ()) -> tuple[bool, str]:
    """Against the default scheduler: primary better somewhere and worse nowhere, no secondary worse."""
    if not primary:
        return False, "no primary comparisons (no levels measured)"
    metric = primary[0].metric
    better = [c for c in primary if c.verdict is Verdict.BETTER]
    worse = [c for c in primary if c.verdict is Verdict.WORSE]
    vetoes = [c for c in secondary if c.verdict is Verdict.WORSE]
    parts: list[str] = []
    if worse:
        parts.append(f"{metric} worse at {_levels(c.describe() for c in worse)}")
        if better:
            parts.append(f"although better at {_levels(c.describe() for c in better)}")
    elif not better:
        within = [f"bg={c.level}" for c in primary if c.verdict is Verdict.WITHIN_NOISE]
        parts.append(f"{metric} better at no level (within noise at {_levels(within) or 'none'})")
    else:
        parts.append(f"{metric} better at {_levels(c.describe() for c in better)}, worse at none")
    if vetoes:
        parts.append("secondary " + "; ".join(f"{c.metric} worse at {c.describe()}" for c in vetoes))
    elif secondary:
        parts.append(f"secondary {', '.join(dict.fromkeys(c.metric for c in secondary))} worse at none")
    parts += _insufficient(primary, secondary)
    wins = bool(better) and not worse and not vetoes
    return wins, ("wins: " if wins else "does not win: ") + "; ".join(parts)


def pareto_verdict(primary: Sequence[Comparison],
                   secondary: Sequence[Comparison] = ()) -> tuple[bool, str]:
    """Against the current best: no metric worse at any level, at least one better somewhere."""
    every = [*primary, *secondary]
    if not every:
        return False, "no comparisons (no levels measured)"
    better = [c for c in every if c.verdict is Verdict.BETTER]
    worse = [c for c in every if c.verdict is Verdict.WORSE]
    parts: list[str] = []
    if worse:
        parts.append("worse: " + "; ".join(f"{c.metric} at {c.describe()}" for c in worse))
    if better:
        parts.append("better: " + "; ".join(f"{c.metric} at {c.describe()}" for c in better))
    if not worse and not better:
        parts.append("every metric within noise at every level")
    parts += _insufficient(primary, secondary)
    keep = bool(better) and not worse
    return keep, ("keep: " if keep else "revert: ") + "; ".join(parts)


def _insufficient(primary: Sequence[Comparison], secondary: Sequence[Comparison]) -> list[str]:
    missing = [c for c in (*primary, *secondary) if c.verdict is Verdict.INSUFFICIENT]
    if not missing:
        return []
    return ["insufficient pairs at " + _levels(f"{c.metric} bg={c.level}" for c in missing)]


def compare_arms(measured: Measured, reference_arm: str, candidate_arm: str, *,
                 primary: tuple[str, Direction], secondary: Sequence[tuple[str, Direction]] = (),
                 floors: Floors = NO_FLOORS) -> LadderComparison:
    """Compare two arms at every level either has; both verdicts (vs default, keep rule)."""
    reference = measured.get(reference_arm, {})
    candidate = measured.get(candidate_arm, {})
    levels = sorted(set(reference) | set(candidate))

    def per_level(metric: str, direction: Direction) -> tuple[Comparison, ...]:
        out = []
        for level in levels:
            ref = reference.get(level, {}).get(metric, {})
            cand = candidate.get(level, {}).get(metric, {})
            n = len(pair_up(ref, cand)[0])
            out.append(compare(ref, cand, level=level, metric=metric, direction=direction,
                               aa_floor=floors.floor(metric, n, level)))
        return tuple(out)

    primary_comparisons = per_level(*primary)
    secondary_comparisons = tuple(c for metric, direction in secondary
                                  for c in per_level(metric, direction))
    wins, reason = ladder_verdict(primary_comparisons, secondary_comparisons)
    keep, keep_reason = pareto_verdict(primary_comparisons, secondary_comparisons)
    return LadderComparison(reference_arm, candidate_arm, primary_comparisons, secondary_comparisons,
                            floors, wins, reason, keep, keep_reason)


def losses(comparison: LadderComparison) -> tuple[tuple[str, int], ...]:
    """The (metric, level) pairs judged `worse`: where the candidate loses to the reference."""
    return tuple((c.metric, c.level) for c in (*comparison.primary, *comparison.secondary)
                 if c.verdict is Verdict.WORSE)


def _primary_better(comparison: LadderComparison) -> bool:
    return any(c.verdict is Verdict.BETTER for c in comparison.primary)


def keep_decision(vs_best: LadderComparison, best_vs_baseline: LadderComparison,
                  candidate_vs_baseline: LadderComparison) -> tuple[bool, str]:
    """The refine loop's decision on a measured candidate (module note): the Pareto rule against
    the best, else the trade rule against the default scheduler: no new loss, better than the
    best on one of the best's losses, worse than the best only where it still does not lose to
    the default, and the primary's win kept."""
    if vs_best.keep:
        return True, vs_best.keep_reason
    before, after = set(losses(best_vs_baseline)), set(losses(candidate_vs_baseline))
    verdicts = {(c.metric, c.level): c.verdict for c in (*vs_best.primary, *vs_best.secondary)}
    gave_back = {key for key, verdict in verdicts.items() if verdict is Verdict.WORSE}
    # progress is judged against the best, in this ladder: a loss that merely reads `within noise`
    # against the default this time is no progress (the first retrain kept a change within noise
    # of the best everywhere that way)
    progress = sorted(key for key in before if verdicts.get(key) is Verdict.BETTER)
    if (progress and after <= before and not (gave_back & after)
            and (_primary_better(candidate_vs_baseline) or not _primary_better(best_vs_baseline))):
        said = "; ".join(f"{metric} at bg={level} "
                         f"{'no longer worse' if (metric, level) not in after else 'less worse'}"
                         for metric, level in progress)
        return True, (f"keep by the trade rule: against the default scheduler {said}, no new loss, "
                      f"and what it gives back against the best is no loss to the default "
                      f"(Pareto against the best: {vs_best.keep_reason})")
    return False, vs_best.keep_reason
