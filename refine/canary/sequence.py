"""The canary's judge: an anytime-valid confidence sequence over paired windows.

Problem: a canary looks at its evidence after every pair of windows (the profile attached, the
kernel's default scheduler) and stops as soon as the answer is clear. A fixed-n test read after
every pair is wrong far more often than its alpha says (simulated: a t test at 5% read after
each of 150 A/A pairs called 44% of 200 streams different; this sequence, 0.5%), and the
canary has no n to fix in advance: a clear regression must stop it in a few pairs, a small gain
may need a hundred.

Approach: per metric, a confidence sequence for the mean paired log ratio, valid at every pair at
once (a time-uniform bound: the chance that it ever excludes the true mean is at most alpha, however
often it is read). The one used is the betting confidence sequence for bounded observations
(Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting", JRSS B 2024,
the hedged capital process with the predictable plug-in bet, their eq. (26)): for each candidate
mean m on a grid, a gambler bets on "the mean is above m" and on "below m" with stakes sized from
the observations before; m leaves the sequence once the capital of either bet reaches 1/alpha
(Ville's inequality). It needs no distribution, only bounds, which makes it fit the lab's skewed
tails: each pair's log ratio is clipped to +-log(CLIP_RATIO) (a pair 4x apart counts as 1.5x: a
larger loss still reads as a loss, and a clipped mean only understates an effect), then mapped
onto [0, 1]. The clip is a trade: a bounded bet can stake at most about 1/range, so the narrower
the range the faster a decision (simulated, 0.1 sd of noise, a 0.77x loss: a median 30 pairs to
`worse` clipped at 2x, 20 at 1.5x); a margin must lie inside it. The sequences are intersected over
time (still valid) so bounds only narrow.

Per metric the orientation makes positive mean better (log(profile/default), negated for a
lower-is-better metric), and alpha is split evenly over the metrics (Bonferroni), so the chance
of any false decision in the whole canary stays at most alpha. Decisions, from the bounds of the
mean log ratio (`margin` is each metric's tolerated loss, a ratio such as 0.05 for 5%):
- worse: some metric's upper bound is below -log(1 + margin): it is worse by more than its
  margin, with confidence: roll back;
- better: the primary's lower bound is above 0 and every secondary's lower bound is above
  -log(1 + margin) (not worse beyond its margin, shown, not assumed): keep;
- otherwise no decision yet.

What it does not do: it assumes the pairs are independent with a common mean (a neighbour whose
load follows the windows breaks that, and the ABBA order only cancels a linear drift within a
block), and the mean it bounds is that of clipped log ratios, which equals the log of the
geometric-mean ratio only while no pair is clipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

CLIP_RATIO = 1.5  # a pair's ratio is clipped to [1/1.5, 1.5] before it is bet on (the module's note)
GRID = 2001  # candidate means on [0, 1]: a bound is exact to 1/2000 of the clipped range
BET_CAP = 0.75  # c of the paper: a bet never stakes more than 3/4 of what it could lose


class Decision(Enum):
    BETTER = "better"
    WORSE = "worse"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Metric:
    """An objective metric as the canary judges it."""

    name: str
    higher_is_better: bool
    margin: float  # the loss it tolerates, as a ratio: 0.05 is 5%
    primary: bool = False


@dataclass(frozen=True)
class Bounds:
    """A metric's confidence sequence after `pairs` pairs, as bounds on the mean log ratio
    (oriented: positive is better), and as ratios (exp of them)."""

    metric: str
    pairs: int
    lower: float
    upper: float
    mean: float  # the clipped mean so far (not a bound)

    @property
    def ratio_lower(self) -> float:
        return math.exp(self.lower)

    @property
    def ratio_upper(self) -> float:
        return math.exp(self.upper)


class ConfidenceSequence:
    """The betting confidence sequence for the mean of observations in [0, 1], updated one
    observation at a time; `interval()` holds at every step at once with probability 1 - alpha."""

    def __init__(self, alpha: float, grid: int = GRID) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.alpha = alpha
        self.m = np.linspace(0.0, 1.0, grid)
        self._log_up = np.zeros(grid)    # log capital of the bets "the mean is above m"
        self._log_down = np.zeros(grid)  # ... "below m"
        self._alive = np.ones(grid, dtype=bool)  # running intersection
        self.n = 0
        self._sum = 0.0
        self._sq = 0.0  # sum of (x_i - mean estimate before i)^2

    def _bet(self) -> float:
        """The predictable plug-in bet of the next observation (before it is seen)."""
        t = self.n + 1
        var_hat = (0.25 + self._sq) / t   # the paper's sigma-hat^2 of the t - 1 observations so far
        return math.sqrt(2.0 * math.log(2.0 / self.alpha) / (var_hat * t * math.log(1.0 + t)))

    def update(self, x: float) -> None:
        if not 0.0 <= x <= 1.0 or math.isnan(x):
            raise ValueError(f"an observation must be in [0, 1], got {x}")
        bet = self._bet()
        with np.errstate(divide="ignore"):
            up = np.minimum(bet, BET_CAP / np.maximum(self.m, 1e-12))
            down = np.minimum(bet, BET_CAP / np.maximum(1.0 - self.m, 1e-12))
        self._log_up += np.log1p(up * (x - self.m))
        self._log_down += np.log1p(-down * (x - self.m))
        # the hedged capital (K+ + K-)/2: itself a test martingale at the true mean (it starts at 1),
        # so Ville's inequality bounds its ever reaching 1/alpha; the paper's max(K+/2, K-/2) is
        # below it, so this sequence is the same bound, read a little tighter
        hedged = np.logaddexp(self._log_up, self._log_down) - math.log(2.0)
        self._alive &= hedged < math.log(1.0 / self.alpha)
        self.n += 1
        self._sum += x
        mean_hat = (0.5 + self._sum) / (self.n + 1)   # the paper's mu-hat_t, this observation in
        self._sq += (x - mean_hat) ** 2

    def interval(self) -> tuple[float, float]:
        """(lower, upper) bounds on the mean; the whole [0, 1] before any observation. If the
        intersection ever empties (possible only when the assumptions fail), it collapses to the
        running mean."""
        inside = self.m[self._alive]
        if inside.size == 0:
            mean = self._sum / max(self.n, 1)
            return mean, mean
        return float(inside[0]), float(inside[-1])


class Sequential:
    """The canary's judge over all its metrics: feed it each pair's values, read the decision."""

    def __init__(self, metrics: Sequence[Metric], alpha: float = 0.05, grid: int = GRID,
                 clip_ratio: float = CLIP_RATIO) -> None:
        if sum(m.primary for m in metrics) != 1:
            raise ValueError("exactly one metric is the primary")
        for metric in metrics:
            if not 0 <= metric.margin < clip_ratio - 1:
                raise ValueError(f"{metric.name}: a margin of {metric.margin:.0%} cannot be shown with "
                                 f"pairs clipped at {clip_ratio}x; use a margin below {clip_ratio - 1:.0%}")
        self.metrics = tuple(metrics)
        self.alpha = alpha
        self._half = math.log(clip_ratio)
        self._cs = {m.name: ConfidenceSequence(alpha / len(metrics), grid) for m in metrics}
        self._means = dict.fromkeys(self._cs, 0.0)

    def log_ratio(self, metric: Metric, profile: float, default: float) -> float:
        """The pair's oriented log ratio, clipped (positive: the profile is better)."""
        if profile <= 0 or default <= 0:
            raise ValueError(f"{metric.name}: a pair needs positive values, got {profile} and {default}")
        value = math.log(profile / default) * (1.0 if metric.higher_is_better else -1.0)
        return max(-self._half, min(self._half, value))

    def add_pair(self, profile: dict[str, float], default: dict[str, float]) -> dict[str, float]:
        """One pair of windows: each metric's value with the profile and with the default; returns
        the oriented, clipped log ratio it added per metric (what the record stores)."""
        added = {}
        for metric in self.metrics:
            added[metric.name] = self.log_ratio(metric, profile[metric.name], default[metric.name])
            self.add(metric, added[metric.name])
        return added

    def add(self, metric: Metric, log_ratio: float) -> None:
        """One pair's oriented log ratio of one metric (positive: better; clipped here)."""
        log_ratio = max(-self._half, min(self._half, log_ratio))
        cs = self._cs[metric.name]
        self._means[metric.name] += (log_ratio - self._means[metric.name]) / (cs.n + 1)
        cs.update((log_ratio + self._half) / (2.0 * self._half))

    def bounds(self) -> list[Bounds]:
        out = []
        for metric in self.metrics:
            cs = self._cs[metric.name]
            low, high = cs.interval()
            out.append(Bounds(metric.name, cs.n, low * 2 * self._half - self._half,
                              high * 2 * self._half - self._half, self._means[metric.name]))
        return out

    def decision(self) -> Decision:
        by_name = {b.metric: b for b in self.bounds()}
        for metric in self.metrics:
            if by_name[metric.name].upper < -math.log1p(metric.margin):
                return Decision.WORSE
        primary = next(m for m in self.metrics if m.primary)
        if by_name[primary.name].lower > 0 and all(
                by_name[m.name].lower > -math.log1p(m.margin) for m in self.metrics if not m.primary):
            return Decision.BETTER
        return Decision.UNDECIDED
