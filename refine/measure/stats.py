"""The judge's statistics (judge.py is the one judge; this is its arithmetic): paired ratios, same-run
per-level noise, verdicts, the keep rule.

Problem: a ladder gives, per arm, level and metric, three or so windows from a machine whose
noise is as large as many effects, and whose noise changes: from level to level (a latency
p99 spread tenfold more at bg=0 than at bg=2) and from run to run (the host's other work comes
and goes). The judge before this one took its floors from a separate, earlier A/A run and
shaped each level's floor from the other levels' tails: a quiet run's floors on a bursty run's
comparisons read 21-30% false verdicts, a loud level set a quiet level's floor (+-24,510% for
an acceptor p99, a veto that could never fire), and a consistent 1.3x loss (8 of 8 pairs worse)
passed as noise. The verdicts must be valid at the sample sizes the lab affords, under the load
the run really met, and one function must give every verdict that a report, the README,
`threadwise ladder` and the refine loop show.

Approach (docs/judge.md "Statistics", calibrated by benchmarks/calibration.py; judge `paired-v5`):
- **Pairs and noise** (pairs.py): every arm runs each level once per repeat, in an order that
  rotates (plan.py); a comparison pairs the two sides' cells of one level and repeat, which
  cancels the host's slow drift, and leaves out a pair the host denied unequally. The default
  scheduler's side of a comparison is both its cells of the repeat (baseline and its A/A twin,
  geometric mean). The effect is exp(mean d). The noise of one pair pools the comparison's own
  residuals (n - 1 degrees of freedom) with the same run's A/A pairs at the level (m, about
  their known mean 0, scaled to the pairs' variance). Nothing comes from another level or
  another run, so a loud level cannot widen a quiet one and a quiet run cannot narrow a loud
  one; a candidate noisier than the A/A arms widens its own interval through its residuals. A
  run without an A/A arm (`threadwise ladder --no-aa`, records before schema 5) uses the
  residuals alone.
- **Interval and verdict.** exp(mean d +- t(1 - ALPHA/(2K); df) * s / sqrt(n)), K the arm
  pair's comparisons (every objective metric at every level): the K intervals of an arm pair
  hold together at 1 - ALPHA (Bonferroni), because the ladder verdict and the keep rule read
  them together, and one false `better` among K is a false answer. (paired-v4 put each
  interval at ALPHA alone: 8.9-10.8% false per comparison at n = 8 on the 2026-12-02 mixed
  pool, docs/judge.md.) `better` when the interval lies wholly on the objective's good side of
  1, `worse` when wholly on the bad side, else `within_noise`; fewer than MIN_PAIRS pairs or
  fewer than MIN_DF degrees of freedom: `insufficient`. An estimate within RESOLUTION (5%) of 1
  is `within_noise` whatever its interval: identical arms at different places in the rotation
  differ by up to 2%, which the A/A arm (at one place) does not carry (the constant's note).
- **Ladder verdict against the default scheduler** (`ladder_verdict`): wins when the primary
  is better at one level or more and worse at none, no secondary is worse anywhere, and every
  comparison is decided; any `insufficient` makes it "not decided", never a win.
- **Keep rule against the current best** (`pareto_verdict`): kept when every comparison is
  decided, no objective metric is worse at any level and at least one metric is better at
  some level. An insufficient comparison is neither better nor worse: it fails the step.
- **Trade rule** (`keep_decision`, when the Pareto rule reverts): a candidate is kept anyway
  when, against the default scheduler in the same ladder, it has no loss (metric and level
  judged `worse`) the best did not have, is judged better than the best on one of the best's
  losses, is worse than the best only where it still does not lose to the default (it gives
  back only part of a win), keeps the primary better somewhere if the best's was, and every
  comparison it rests on is decided.
- **Stopping early** (`early_loss`): after each repeat a step's candidate that is worse than
  both the best and the default scheduler on one metric and level, at the stricter
  EARLY_ALPHA (one-sided), cannot be kept by either rule, and its run stops there.
- Zero and negative values: metrics are rates and latencies, so a negative or non-finite
  sample is an error. 0/0 is a ratio of 1, x/0 and 0/x are clipped to 1e6 and 1e-6 (beyond any
  interval) so that every log ratio stays finite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import numpy as np

from threadwise.refine.measure.pairs import (
    ALPHA,
    LOG_CLIP,
    MIN_DF,
    NO_NOISE,
    PAIR_DENIED_MAX,
    Measured,
    Noise,
    Obs,
    aa_ratios,
    log_ratio,
    pair_up,
    paired,
    pooled_noise,
)

# the judge's face: what stats defines, and the pairs' names it is read by (pairs.py)
__all__ = [
    "ALPHA", "DEFAULT_SCALE", "DIRECTIONS", "EARLY_ALPHA", "LOG_CLIP", "METHOD", "MIN_DF", "MIN_PAIRS",
    "NO_FLOORS", "NO_NOISE", "PAIR_DENIED_MAX", "RESOLUTION", "Comparison", "Direction", "Floors",
    "LadderComparison", "Measured", "Noise", "Obs", "Verdict", "aa_floors", "aa_ratios", "classify",
    "compare", "compare_arms", "early_loss", "first_repeats", "keep_decision", "ladder_verdict",
    "log_ratio", "losses", "pair_up", "pareto_verdict", "pooled_noise",
]

Direction = Literal["higher", "lower"]

MIN_PAIRS = 2
EARLY_ALPHA = 0.001  # one-sided, per comparison and look: stopping a step early for a loss
# The smallest difference a verdict names. Identical arms at different places in a ladder's
# rotation are not identical at the 2% scale: in a pool of 10-s windows (benchmarks/data/
# lab-calibration-w10.duckdb, 2026-11-29) the third default-scheduler arm read hot-0 1.9% below
# the first at bg=0 in 7 of 8 repeats, while the A/A arm, at another place, read 0.5% below;
# pairs spread 1.3-1.4% there, so an interval that excludes 1 named a 2% artefact "worse" in
# 20-57% of draws. The A/A arm carries the noise of its own place, not the offset of another's.
# Differences under RESOLUTION are "within noise" whatever their interval (docs/judge.md).
RESOLUTION = 0.05
DEFAULT_SCALE = 0.75  # a pair against both default cells varies 1.5 s_c^2, an A/A pair 2 s_c^2 (pairs.py)
DIRECTIONS: tuple[Direction, ...] = ("higher", "lower")
METHOD = ("paired-v5: mean of paired log ratios (the default scheduler's side: the geometric mean of "
          "its two cells of the repeat) +- t(1 - alpha/2K; df) x s / sqrt(n), K the arm pair's "
          "comparisons (simultaneous intervals), s pooled from the pairs' residuals and the same "
          "level's A/A pairs of the same run; a verdict names a difference of at least "
          f"{RESOLUTION:.0%}")


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    WITHIN_NOISE = "within_noise"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class Floors:
    """What the A/A arm alone says per metric and level, for reports: the half-width a
    comparison against the default scheduler of n pairs would have if its own pairs agreed
    exactly (metric -> level -> Noise of the A/A pairs alone, m degrees of freedom, scaled to a
    pair against both default cells; each at `alpha`, the run's simultaneous share). The
    verdicts pool these pairs with the comparison's own residuals (`compare`); this is the floor
    no comparison against the default scheduler goes below."""

    by_level: Mapping[str, Mapping[int, Noise]] = field(default_factory=dict)
    run_id: int | None = None
    method: str = "none"
    alpha: float = ALPHA

    def floor(self, metric: str, n: int, level: int) -> float | None:
        noise = self.by_level.get(metric, {}).get(level)
        if noise is None:
            return None
        half = noise.half_width(n, self.alpha)
        return half if math.isfinite(half) else None

    def margin(self, metric: str, n: int) -> str:
        """`bg=0 +-3.1%, bg=2 +-12.3%` at n pairs (levels with too few A/A pairs: `-`), or
        `not measured` when the run had no A/A arm."""
        levels = self.by_level.get(metric, {})
        if not levels:
            return "not measured"
        return ", ".join(f"bg={level} " + (f"+-{math.expm1(f):.1%}" if (f := self.floor(metric, n, level))
                                           is not None else "-") for level in sorted(levels))

    def pairs(self, metric: str) -> int:
        return sum(noise.aa_pairs for noise in self.by_level.get(metric, {}).values())


NO_FLOORS = Floors()


@dataclass(frozen=True)
class Comparison:
    """One level and metric: candidate against reference, paired.

    `ratio` = exp(mean paired log ratio); `ci_low`/`ci_high` its interval (NaN when
    insufficient); `floor` the interval's half-width (log scale); `noise` what it was made of.
    `reference_median` and `candidate_median` are medians of each arm's valid cells (shown
    beside the ratio).
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
    noise: Noise = NO_NOISE

    def describe(self) -> str:
        """E.g. `bg=8 1.12 [1.05, 1.19]`."""
        if self.verdict is Verdict.INSUFFICIENT:
            return f"bg={self.level} ({self.pairs} valid pairs, {self.noise.df} noise df)"
        return f"bg={self.level} {self.ratio:.3g} [{self.ci_low:.3g}, {self.ci_high:.3g}]"


@dataclass(frozen=True)
class LadderComparison:
    """A candidate arm against a reference arm over the whole ladder.

    `primary` one Comparison per level of the primary metric, `secondary` one per
    level of each secondary metric (metric-major); `wins`/`reason` are
    `ladder_verdict` (against the default scheduler) and `keep`/`keep_reason`
    `pareto_verdict` (the refine loop's rule against the current best); `aa_arm` the A/A arm
    whose pairs gave the noise (None: the pairs' own residuals only); `each_alpha` the two-sided
    alpha of each interval (ALPHA / K for K simultaneous comparisons).
    """

    reference: str
    candidate: str
    primary: tuple[Comparison, ...]
    secondary: tuple[Comparison, ...]
    aa_arm: str | None
    wins: bool
    reason: str
    keep: bool = False
    keep_reason: str = ""
    each_alpha: float = ALPHA

    def comparisons(self, metric: str) -> tuple[Comparison, ...]:
        return tuple(c for c in (*self.primary, *self.secondary) if c.metric == metric)

    @property
    def decided(self) -> bool:
        return all(c.verdict is not Verdict.INSUFFICIENT for c in (*self.primary, *self.secondary))


def _check(values: Iterable[float], what: str) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: samples must be finite, got {array[~np.isfinite(array)][:3]}")
    if np.any(array < 0):
        raise ValueError(f"{what}: negative samples {array[array < 0][:3]}; a ratio needs a "
                         "non-negative metric (a rate or a latency)")
    return array


def classify(low: float, high: float, *, direction: Direction, pairs: int, df: int = MIN_DF,
             ratio: float | None = None) -> Verdict:
    """The verdict of a ratio interval in the objective's direction; a `ratio` (the estimate)
    within RESOLUTION of 1 is within noise however narrow its interval."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if pairs < MIN_PAIRS or df < MIN_DF or not (math.isfinite(low) and math.isfinite(high)):
        return Verdict.INSUFFICIENT
    if ratio is not None and abs(math.log(ratio)) < math.log1p(RESOLUTION):
        return Verdict.WITHIN_NOISE
    above, below = low > 1.0, high < 1.0
    if direction == "higher":
        return Verdict.BETTER if above else Verdict.WORSE if below else Verdict.WITHIN_NOISE
    return Verdict.BETTER if below else Verdict.WORSE if above else Verdict.WITHIN_NOISE


def compare(reference: Mapping[int, Obs], candidate: Mapping[int, Obs], *, level: int, metric: str,
            direction: Direction, aa_ratios: Sequence[float] = (), alpha: float = ALPHA,
            twin: Mapping[int, Obs] | None = None, twin_of_reference: bool = True) -> Comparison:
    """One level and metric: paired ratio, interval at `alpha` and verdict (see the module's note).
    `aa_ratios`: the same run's A/A log ratios at this level (none: the pairs' residuals only);
    `twin`: the default scheduler's second arm when one side is the baseline (pairs.paired)."""
    ref_values = _check((o.value for o in reference.values()), f"{metric} at bg={level}, reference")
    cand_values = _check((o.value for o in candidate.values()), f"{metric} at bg={level}, candidate")
    if twin is not None:
        _check((o.value for o in twin.values()), f"{metric} at bg={level}, the default's twin")
    ref_median = float(np.median(ref_values)) if ref_values.size else float("nan")
    cand_median = float(np.median(cand_values)) if cand_values.size else float("nan")
    pairs = paired(reference, candidate, twin=twin, twin_of_reference=twin_of_reference)
    ratios, disturbed = pairs.ratios, pairs.disturbed
    noise = pooled_noise(ratios, aa_ratios, aa_scale=pairs.scale)
    nan = float("nan")
    if not ratios:
        return Comparison(level, metric, direction, ref_median, cand_median, nan, nan, nan,
                          int(ref_values.size), int(cand_values.size), Verdict.INSUFFICIENT, 0,
                          disturbed, nan, noise)
    estimate = float(np.mean(ratios))
    half = noise.half_width(len(ratios), alpha) if len(ratios) >= MIN_PAIRS else nan
    low, high = (math.exp(estimate - half), math.exp(estimate + half)) if math.isfinite(half) else (nan, nan)
    verdict = classify(low, high, direction=direction, pairs=len(ratios), df=noise.df,
                       ratio=math.exp(estimate))
    return Comparison(level, metric, direction, ref_median, cand_median, math.exp(estimate), low, high,
                      int(ref_values.size), int(cand_values.size), verdict, len(ratios), disturbed,
                      half, noise)


def aa_floors(measured: Measured, reference: str, aa_arm: str, metrics: Sequence[str], *,
              run_id: int | None = None) -> Floors:
    """Per metric and level, the noise of the A/A arm's pairs alone, as a comparison against the
    default scheduler (both its cells) would use it: scaled by 0.75, each at ALPHA / K with K the
    run's metrics times levels (for reports and the `floor` table; the verdicts pool them with
    each comparison's residuals)."""
    a, b = measured.get(reference, {}), measured.get(aa_arm, {})
    levels = sorted(set(a) & set(b))
    by_level = {metric: {level: pooled_noise([], pair_up(a[level].get(metric, {}),
                                                         b[level].get(metric, {}))[0], aa_scale=DEFAULT_SCALE)
                         for level in levels}
                for metric in metrics}
    k = max(1, len(levels) * len(metrics))
    return Floors(by_level, run_id, f"A/A pairs of the same run and level (arm {aa_arm}): "
                  f"t(1 - {ALPHA}/(2 x {k}); m) x s / sqrt(n), s = sqrt(0.75 mean e^2)", ALPHA / k)


def _levels(names: Iterable[str]) -> str:
    return ", ".join(names)


def ladder_verdict(primary: Sequence[Comparison],
                   secondary: Sequence[Comparison] = ()) -> tuple[bool, str]:
    """Against the default scheduler: primary better somewhere and worse nowhere, no secondary
    worse, and every comparison decided (an insufficient one makes it "not decided")."""
    if not primary:
        return False, "no primary comparisons (no levels measured)"
    metric = primary[0].metric
    better = [c for c in primary if c.verdict is Verdict.BETTER]
    worse = [c for c in primary if c.verdict is Verdict.WORSE]
    vetoes = [c for c in secondary if c.verdict is Verdict.WORSE]
    missing = _insufficient(primary, secondary)
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
    parts += missing
    if missing and not worse and not vetoes:
        return False, "not decided: " + "; ".join(parts)
    wins = bool(better) and not worse and not vetoes
    return wins, ("wins: " if wins else "does not win: ") + "; ".join(parts)


def pareto_verdict(primary: Sequence[Comparison],
                   secondary: Sequence[Comparison] = ()) -> tuple[bool, str]:
    """Against the current best: every comparison decided, no metric worse at any level, at
    least one better somewhere."""
    every = [*primary, *secondary]
    if not every:
        return False, "no comparisons (no levels measured)"
    better = [c for c in every if c.verdict is Verdict.BETTER]
    worse = [c for c in every if c.verdict is Verdict.WORSE]
    missing = _insufficient(primary, secondary)
    parts: list[str] = []
    if worse:
        parts.append("worse: " + "; ".join(f"{c.metric} at {c.describe()}" for c in worse))
    if better:
        parts.append("better: " + "; ".join(f"{c.metric} at {c.describe()}" for c in better))
    if not worse and not better:
        parts.append("every metric within noise at every level")
    parts += missing
    keep = bool(better) and not worse and not missing
    if missing and not worse:
        return False, "revert (not decided: an insufficient comparison is no evidence): " + "; ".join(parts)
    return keep, ("keep: " if keep else "revert: ") + "; ".join(parts)


def _insufficient(primary: Sequence[Comparison], secondary: Sequence[Comparison]) -> list[str]:
    missing = [c for c in (*primary, *secondary) if c.verdict is Verdict.INSUFFICIENT]
    if not missing:
        return []
    return ["insufficient at " + _levels(f"{c.metric} {c.describe()}" for c in missing)]


def compare_arms(measured: Measured, reference_arm: str, candidate_arm: str, *,
                 primary: tuple[str, Direction], secondary: Sequence[tuple[str, Direction]] = (),
                 twins: tuple[str, str] | None = None, alpha: float = ALPHA,
                 simultaneous: bool = True) -> LadderComparison:
    """Compare two arms at every level either has; both verdicts (vs default, keep rule).
    `twins` = (the baseline, its A/A repeat) of the same run: their pairs at each level are the
    noise, whichever two arms are compared, and a side that is the baseline is both their cells
    (None: the compared pairs' own residuals, the baseline's cells alone). `simultaneous`: the K
    intervals (every metric at every level) at `alpha` together, each at alpha / K; False: each
    at `alpha` (early_loss, whose alpha is per comparison)."""
    reference = measured.get(reference_arm, {})
    candidate = measured.get(candidate_arm, {})
    levels = sorted(set(reference) | set(candidate))
    each = alpha / max(1, len(levels) * (1 + len(secondary))) if simultaneous else alpha
    # the default scheduler's side is both its cells, unless the other side is the twin itself
    # (the A/A check, baseline -> baseline-aa, stays one pair of one cell each)
    default_side = (None if twins is None or twins[1] in (reference_arm, candidate_arm)
                    else True if reference_arm == twins[0] else False if candidate_arm == twins[0] else None)

    def per_level(metric: str, direction: Direction) -> tuple[Comparison, ...]:
        return tuple(compare(reference.get(level, {}).get(metric, {}),
                             candidate.get(level, {}).get(metric, {}), level=level, metric=metric,
                             direction=direction, aa_ratios=aa_ratios(measured, twins, level, metric),
                             alpha=each,
                             twin=(None if default_side is None or twins is None else
                                   measured.get(twins[1], {}).get(level, {}).get(metric, {})),
                             twin_of_reference=default_side is not False)
                     for level in levels)

    primary_comparisons = per_level(*primary)
    secondary_comparisons = tuple(c for metric, direction in secondary
                                  for c in per_level(metric, direction))
    wins, reason = ladder_verdict(primary_comparisons, secondary_comparisons)
    keep, keep_reason = pareto_verdict(primary_comparisons, secondary_comparisons)
    return LadderComparison(reference_arm, candidate_arm, primary_comparisons, secondary_comparisons,
                            twins[1] if twins else None, wins, reason, keep, keep_reason, each)


def losses(comparison: LadderComparison) -> tuple[tuple[str, int], ...]:
    """The (metric, level) pairs judged `worse`: where the candidate loses to the reference."""
    return tuple((c.metric, c.level) for c in (*comparison.primary, *comparison.secondary)
                 if c.verdict is Verdict.WORSE)


def _primary_better(comparison: LadderComparison) -> bool:
    return any(c.verdict is Verdict.BETTER for c in comparison.primary)


def keep_decision(vs_best: LadderComparison, best_vs_baseline: LadderComparison,
                  candidate_vs_baseline: LadderComparison) -> tuple[bool, str]:
    """The refine loop's decision on a measured candidate (module note): the Pareto rule against
    the best, else the trade rule against the default scheduler: every comparison decided, no
    new loss, better than the best on one of the best's losses, worse than the best only where
    it still does not lose to the default, and the primary's win kept."""
    if vs_best.keep:
        return True, vs_best.keep_reason
    undecided = [lc for lc in (vs_best, best_vs_baseline, candidate_vs_baseline) if not lc.decided]
    if undecided:
        return False, vs_best.keep_reason
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


def first_repeats(measured: Measured, k: int) -> Measured:
    """The cells of repeats 1..k only: what a ladder had measured when its k-th repeat was complete
    (early stop asks early_loss on it, live and in a replay)."""
    return {arm: {level: {metric: {r: obs for r, obs in cells.items() if r <= k}
                          for metric, cells in by_metric.items()}
                  for level, by_metric in levels.items()}
            for arm, levels in measured.items()}


def early_loss(measured: Measured, *, baseline: str, best: str, candidate: str,
               twins: tuple[str, str] | None,
               primary: tuple[str, Direction],
               secondary: Sequence[tuple[str, Direction]] = ()) -> str | None:
    """After some repeats: why the candidate cannot be kept whatever the rest says, or None.

    A metric and level where the candidate is worse than the best AND worse than the default
    scheduler, each at the one-sided EARLY_ALPHA, is a loss the Pareto rule reverts and the
    trade rule refuses (it gives back, against the best, a loss to the default). Strict on
    purpose: the run's remaining repeats would have decided the step anyway, so a stop must
    be near-certain (benchmarks/calibration.py measures how often it is wrong)."""
    strict = 2 * EARLY_ALPHA  # compare's alpha is two-sided
    vs_best = compare_arms(measured, best, candidate, primary=primary, secondary=secondary,
                           twins=twins, alpha=strict, simultaneous=False)
    vs_base = compare_arms(measured, baseline, candidate, primary=primary, secondary=secondary,
                           twins=twins, alpha=strict, simultaneous=False)
    lost = sorted(set(losses(vs_best)) & set(losses(vs_base)))
    if not lost:
        return None
    shown = {(c.metric, c.level): c.describe() for c in (*vs_best.primary, *vs_best.secondary)}
    return ("worse than the best and the default scheduler at "
            + "; ".join(f"{metric} {shown[(metric, level)]}" for metric, level in lost)
            + f" (one-sided alpha {EARLY_ALPHA} each)")
