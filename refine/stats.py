"""Statistics of a ladder: ratio of medians, seeded bootstrap CIs, verdicts, the ladder verdict.

Problem: a ladder gives, per arm, background level and metric, a handful of
samples (one per valid window) from a noisy machine. A refinement step may
only be kept when the candidate is better than the current best beyond that
noise somewhere and worse nowhere, and the same numbers must always give the
same decision, so that a report can recompute every decision it shows.

Approach (docs/refine.md "Statistics"):
- The effect size is the ratio of medians, candidate / reference. Medians,
  because a window that caught a stall moves a mean but not a median; a
  ratio, because metrics differ in unit and scale (requests/s, ms) and the
  noise floor is a relative margin that must apply to all of them.
- Its 95% CI is a percentile bootstrap: each arm's valid samples are
  resampled independently (they are separate windows, not pairs), the ratio
  of the resampled medians is taken `n_boot` times and the CI is the
  (1-c)/2 and (1+c)/2 percentiles of those ratios. The percentile bootstrap
  needs no distributional assumption, handles the skew of latency metrics and
  is invariant under the monotone map ratio -> log(ratio), so nothing changes
  if one would rather think in log ratios. The bounds are taken with the
  "lower" and "higher" order statistics (no interpolation): slightly
  conservative, and defined when a bound is infinite. A generator seeded by
  the caller makes every CI reproducible.
- Verdict in the objective's direction: `better` when the whole CI lies
  beyond `1 +/- noise` on the good side, `worse` when it lies beyond it on the
  bad side, else `within_noise`; fewer than 2 valid samples in an arm:
  `insufficient` (no CI). `classify` is the single place this is decided.
- Zero and negative values, explicitly: the metrics are rates and latencies,
  so a negative sample is an error (ValueError), as is a non-finite one. A
  zero median is legitimate (a latency rounded to 0 ms): 0/0 counts as a
  ratio of 1 (no change) and x/0 with x > 0 as +inf (an increase beyond any
  margin), in the point estimate and in every bootstrap replicate alike.
- A/A noise (`noise_floor`): the largest |bound - 1| over the CIs of an arm
  compared with itself, or 0 when there is none.
- A candidate wins a ladder (`ladder_verdict`) when on the primary metric it
  is `better` at one level or more and `worse` at none, and on each secondary
  metric `worse` at none; `insufficient` counts as neither. The reason names
  the levels that decided.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np

Direction = Literal["higher", "lower"]
Seed = int | Sequence[int]
# arm -> background level -> metric -> the valid samples of that cell's windows
Measured = dict[str, dict[int, dict[str, list[float]]]]

MIN_SAMPLES = 2
DIRECTIONS: tuple[Direction, ...] = ("higher", "lower")


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    WITHIN_NOISE = "within_noise"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class Comparison:
    """One level and metric: candidate against reference.

    `ratio`, `ci_low` and `ci_high` are candidate/reference (NaN where an arm
    has no samples, or for the CI of an `insufficient` comparison); `noise` is
    the margin the verdict was taken with, so that the verdict can be
    recomputed from this record alone (`classify`).
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
    noise: float = 0.0

    def describe(self) -> str:
        """E.g. `bg=8 1.12 [1.05, 1.19]`."""
        if self.verdict is Verdict.INSUFFICIENT:
            return (f"bg={self.level} (n={self.n_reference} reference, "
                    f"{self.n_candidate} candidate samples)")
        return f"bg={self.level} {self.ratio:.3g} [{self.ci_low:.3g}, {self.ci_high:.3g}]"


@dataclass(frozen=True)
class LadderComparison:
    """A candidate arm against a reference arm over the whole ladder.

    `primary` holds one Comparison per level of the primary metric,
    `secondary` one per level of each secondary metric (metric-major, in the
    order given), all taken with `noise`; `seed` is what `compare_arms` was
    given. `wins` and `reason` are `ladder_verdict(primary, secondary)`.
    """

    reference: str
    candidate: str
    primary: tuple[Comparison, ...]
    secondary: tuple[Comparison, ...]
    noise: float
    seed: Seed
    wins: bool
    reason: str

    def comparisons(self, metric: str) -> tuple[Comparison, ...]:
        return tuple(c for c in (*self.primary, *self.secondary) if c.metric == metric)


def _samples(values: Iterable[float], what: str) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{what}: samples must be a flat list of numbers")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: samples must be finite, got {array[~np.isfinite(array)][:3]}")
    if np.any(array < 0):
        raise ValueError(f"{what}: negative samples {array[array < 0][:3]}; a ratio of medians "
                         "needs a non-negative metric (a rate or a latency)")
    return array


def _ratio(candidate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """candidate / reference elementwise, with 0/0 = 1 and x/0 = +inf (inputs >= 0)."""
    candidate, reference = np.broadcast_arrays(np.asarray(candidate, float),
                                               np.asarray(reference, float))
    out = np.ones(candidate.shape, dtype=float)
    nonzero = reference > 0
    out[nonzero] = candidate[nonzero] / reference[nonzero]
    out[~nonzero & (candidate > 0)] = np.inf
    return out


def classify(ci_low: float, ci_high: float, *, direction: Direction, noise: float,
             n_reference: int, n_candidate: int) -> Verdict:
    """The verdict of a ratio CI in the objective's direction (docs/refine.md)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if n_reference < MIN_SAMPLES or n_candidate < MIN_SAMPLES:
        return Verdict.INSUFFICIENT
    above, below = ci_low > 1.0 + noise, ci_high < 1.0 - noise
    if direction == "higher":
        return Verdict.BETTER if above else Verdict.WORSE if below else Verdict.WITHIN_NOISE
    return Verdict.BETTER if below else Verdict.WORSE if above else Verdict.WITHIN_NOISE


def compare(reference: Sequence[float], candidate: Sequence[float], *, level: int, metric: str,
            direction: Direction, noise: float = 0.0, seed: Seed, n_boot: int = 4000,
            confidence: float = 0.95) -> Comparison:
    """Ratio of medians candidate/reference with a seeded percentile bootstrap CI and verdict."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise is a non-negative relative margin, got {noise}")
    ref = _samples(reference, f"{metric} at bg={level}, reference")
    cand = _samples(candidate, f"{metric} at bg={level}, candidate")
    ref_median = float(np.median(ref)) if ref.size else float("nan")
    cand_median = float(np.median(cand)) if cand.size else float("nan")
    ratio = (float(_ratio(np.array(cand_median), np.array(ref_median)))
             if ref.size and cand.size else float("nan"))
    low = high = float("nan")
    if ref.size >= MIN_SAMPLES and cand.size >= MIN_SAMPLES:
        rng = np.random.default_rng(seed)
        ref_boot = np.median(ref[rng.integers(0, ref.size, (n_boot, ref.size))], axis=1)
        cand_boot = np.median(cand[rng.integers(0, cand.size, (n_boot, cand.size))], axis=1)
        ratios = _ratio(cand_boot, ref_boot)
        tail = (1.0 - confidence) / 2.0
        low = float(np.quantile(ratios, tail, method="lower"))
        high = float(np.quantile(ratios, 1.0 - tail, method="higher"))
    verdict = classify(low, high, direction=direction, noise=noise, n_reference=int(ref.size),
                       n_candidate=int(cand.size))
    return Comparison(level, metric, direction, ref_median, cand_median, ratio, low, high,
                      int(ref.size), int(cand.size), verdict, float(noise))


def noise_floor(aa_comparisons: Iterable[Comparison]) -> float:
    """The noise margin of an A/A ladder: the largest |bound - 1| over its CIs (0 if none).

    Insufficient comparisons have no CI and are skipped, and so are infinite
    bounds (a zero median in one A/A arm says nothing about relative noise).
    """
    bounds = [abs(b - 1.0) for c in aa_comparisons if c.verdict is not Verdict.INSUFFICIENT
              for b in (c.ci_low, c.ci_high) if np.isfinite(b)]
    return float(max(bounds, default=0.0))


def cell_seed(seed: Seed, level: int, metric: str) -> list[int]:
    """The bootstrap seed of one level and metric within a ladder comparison (stable)."""
    base = [seed] if isinstance(seed, int) else list(seed)
    return [*base, level, zlib.crc32(metric.encode())]


def _levels(names: Iterable[str]) -> str:
    return ", ".join(names)


def ladder_verdict(primary: Sequence[Comparison],
                   secondary: Sequence[Comparison] = ()) -> tuple[bool, str]:
    """Whether the candidate wins the ladder, and why (docs/refine.md "A candidate wins")."""
    if not primary:
        return False, "no primary comparisons (no levels measured)"
    metric = primary[0].metric
    better = [c for c in primary if c.verdict is Verdict.BETTER]
    worse = [c for c in primary if c.verdict is Verdict.WORSE]
    vetoes = [c for c in secondary if c.verdict is Verdict.WORSE]
    insufficient = [c for c in (*primary, *secondary) if c.verdict is Verdict.INSUFFICIENT]
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
        parts.append(f"secondary {', '.join(dict.fromkeys(c.metric for c in secondary))} "
                     "worse at none")
    if insufficient:
        parts.append("insufficient samples at " + _levels(
            f"{c.metric} bg={c.level}" for c in insufficient))
    wins = bool(better) and not worse and not vetoes
    return wins, ("wins: " if wins else "does not win: ") + "; ".join(parts)


def compare_arms(measured: Measured, reference_arm: str, candidate_arm: str, *,
                 primary: tuple[str, Direction], secondary: Sequence[tuple[str, Direction]] = (),
                 noise: float = 0.0, seed: Seed, n_boot: int = 4000,
                 confidence: float = 0.95) -> LadderComparison:
    """Compare two arms of a ladder at every level either arm has, and decide the ladder.

    A level or metric one arm lacks compares as `insufficient` (no samples).
    Each (level, metric) is bootstrapped with its own seed, `cell_seed(seed, level, metric)`.
    """
    reference = measured.get(reference_arm, {})
    candidate = measured.get(candidate_arm, {})
    levels = sorted(set(reference) | set(candidate))

    def per_level(metric: str, direction: Direction) -> tuple[Comparison, ...]:
        return tuple(compare(reference.get(level, {}).get(metric, []),
                             candidate.get(level, {}).get(metric, []), level=level,
                             metric=metric, direction=direction, noise=noise,
                             seed=cell_seed(seed, level, metric), n_boot=n_boot,
                             confidence=confidence)
                     for level in levels)

    primary_comparisons = per_level(*primary)
    secondary_comparisons = tuple(c for metric, direction in secondary
                                  for c in per_level(metric, direction))
    wins, reason = ladder_verdict(primary_comparisons, secondary_comparisons)
    return LadderComparison(reference_arm, candidate_arm, primary_comparisons,
                            secondary_comparisons, float(noise), seed, wins, reason)
