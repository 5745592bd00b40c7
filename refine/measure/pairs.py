"""The judge's pairs and their noise (stats.py builds verdicts on them): paired log ratios, the
default scheduler's two cells of a repeat as one reference, the A/A noise of one pair.

Problem: a comparison's interval is only as honest as the noise it is given. The judge of ladder
schema 5 (`paired-v4`) paired the candidate with the baseline arm alone and pooled the pairs'
residuals with the A/A pairs (baseline-aa against the same baseline cells) at n - 1 + m degrees
of freedom. Two things were measured against it (benchmarks/RESULTS.md, calibration sections of
2026-12-05; docs/judge.md "Why paired-v5"): the A/A pairs share their baseline cell with the
comparison's pairs (correlated, so the m A/A degrees of freedom are not all new information),
and the default scheduler is measured twice per repeat while a comparison used one of the two.

Approach (`paired-v5`):
- **Pairs.** d_r = log(candidate_r / reference_r) of the repeats both sides have; a pair whose
  cells the host denied unequal shares of vCPU time (|difference| > PAIR_DENIED_MAX,
  runtime/lab/hostload.py) is left out and counted as disturbed.
- **The default scheduler's side is both its cells.** When one side of a comparison is the
  baseline and the run has its A/A twin (and the other side is not that twin), the side's value
  in a repeat is the geometric mean of the two default-scheduler cells of that repeat (the valid
  ones not denied apart from the other side's cell; one alone when the other is missing). With
  equal cell variance s_c^2 a pair then varies by 1.5 s_c^2 instead of 2 s_c^2, and
  d_r = c - (a + b)/2 is uncorrelated with the A/A pair e_r = a - b: the pooled degrees of
  freedom count independent information again.
- **Noise of one pair.** s^2 = (sum (d_r - mean d)^2 + f * sum e_r^2) / (n - 1 + m), where f is
  the mean over the pairs of the pair's variance relative to a plain pair's (0.75 for a pair
  against both default cells, 1 against one cell): e_r, a plain pair of identical arms about
  its known mean 0, estimates 2 s_c^2, so f * e_r^2 estimates the variance of a pair as it was
  formed. A run without an A/A arm uses the residuals alone (n - 1 degrees of freedom).
- Nothing comes from another level or another run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

MIN_DF = 2  # degrees of freedom the noise estimate needs (t(0.975; 1) = 12.7 is no interval)
ALPHA = 0.05  # two-sided, shared by an arm pair's comparisons (stats.compare_arms: each at ALPHA / K)
# A pair whose two cells the host denied shares of vCPU time differing by more than this is
# left out of a comparison (hostload.py). Set from the first pool (docs/lab.md "Host
# interference"): every A/A pair off by more than 30% had a gap above 0.16, undisturbed pairs
# sat within 0.03 of each other. The A/A pairs are filtered alike, so the noise is that of the
# pairs the comparison keeps.
PAIR_DENIED_MAX = 0.10
LOG_CLIP = math.log(1e6)


@dataclass(frozen=True)
class Obs:
    """One valid cell's value of a metric, with the share of vCPU time the host denied it."""

    value: float
    denied: float | None = None


# arm -> background level -> metric -> repeat -> the valid cell's observation
Measured = dict[str, dict[int, dict[str, dict[int, Obs]]]]


@dataclass(frozen=True)
class Noise:
    """One level's noise as a comparison used it: the pooled s of one pair (log scale), its
    degrees of freedom, and how many A/A pairs of the same run and level it rests on."""

    sd: float
    df: int
    aa_pairs: int

    def half_width(self, n: int, alpha: float = ALPHA, *, sides: int = 2) -> float:
        """t(1 - alpha/sides; df) * s / sqrt(n): the interval's half-width at n pairs."""
        if self.df < MIN_DF or n < 1 or not math.isfinite(self.sd):
            return float("nan")
        return float(student_t.ppf(1.0 - alpha / sides, self.df)) * self.sd / math.sqrt(n)


NO_NOISE = Noise(float("nan"), 0, 0)


def log_ratio(candidate: float, reference: float) -> float:
    """log(candidate / reference) with 0/0 = 0 and a zero on one side clipped to +-LOG_CLIP."""
    if reference <= 0 and candidate <= 0:
        return 0.0
    if reference <= 0:
        return LOG_CLIP
    if candidate <= 0:
        return -LOG_CLIP
    return float(np.clip(math.log(candidate / reference), -LOG_CLIP, LOG_CLIP))


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


@dataclass(frozen=True)
class Paired:
    """A comparison's pairs: log ratios, pairs left out as disturbed, and the pairs' mean variance
    relative to a plain pair of two cells (`scale`: 0.75 against both default cells, 1 else)."""

    ratios: list[float]
    disturbed: int
    scale: float = 1.0


def _default_value(cells: Sequence[Obs]) -> float:
    """The default scheduler's value of a repeat from its valid cells: their geometric mean (the
    arithmetic mean where a cell is 0, as the screen takes it: search/screen.py)."""
    values = [o.value for o in cells]
    if any(v <= 0 for v in values):
        return sum(values) / len(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def paired(reference: Mapping[int, Obs], candidate: Mapping[int, Obs], *,
           twin: Mapping[int, Obs] | None = None, twin_of_reference: bool = True) -> Paired:
    """The comparison's pairs. `twin`: the default scheduler's second arm, when one side is the
    baseline (`twin_of_reference`: the reference side, else the candidate side); that side's value
    in a repeat is then the mean of its cells (module note). Without a twin, pair_up's pairs."""
    if twin is None:
        ratios, disturbed = pair_up(reference, candidate)
        return Paired(ratios, disturbed)
    default, other = (reference, candidate) if twin_of_reference else (candidate, reference)
    ratios, scales, disturbed = [], [], 0
    for repeat in sorted((set(default) | set(twin)) & set(other)):
        against = other[repeat]
        cells = [o for o in (default.get(repeat), twin.get(repeat)) if o is not None]
        kept = [o for o in cells if not _denied_apart(o, against)]
        if not kept:
            disturbed += 1
            continue
        value = _default_value(kept)
        ratio = log_ratio(against.value, value)
        ratios.append(ratio if twin_of_reference else -ratio)
        scales.append((1.0 + 1.0 / len(kept)) / 2.0)  # var of c - mean(k cells) over 2 s_c^2
    return Paired(ratios, disturbed, float(np.mean(scales)) if scales else 1.0)


def pooled_noise(ratios: Sequence[float], aa: Sequence[float], *, aa_scale: float = 1.0) -> Noise:
    """The pooled s of one pair: the comparison's residuals (n - 1 df) and the A/A ratios about
    their known mean 0 (m df), each A/A square scaled by `aa_scale` to the variance of the
    comparison's pairs (Paired.scale). Uncentred A/A ratios are conservative: a bias between two
    identical arms (one position favoured) widens the noise instead of hiding in a mean."""
    d, e = np.asarray(ratios, dtype=float), np.asarray(aa, dtype=float)
    df = max(d.size - 1, 0) + e.size
    if df < 1:
        return Noise(float("nan"), df, int(e.size))
    squares = (float(np.sum((d - d.mean()) ** 2)) if d.size else 0.0) + aa_scale * float(np.sum(e ** 2))
    return Noise(math.sqrt(squares / df), df, int(e.size))


def aa_ratios(measured: Measured, twins: tuple[str, str] | None, level: int, metric: str) -> list[float]:
    """The A/A log ratios of one level: `twins` = (arm, its repeat) paired by repeat, disturbed
    pairs left out as every comparison leaves them out."""
    if twins is None:
        return []
    arm, twin = (measured.get(name, {}).get(level, {}).get(metric, {}) for name in twins)
    return pair_up(arm, twin)[0]
