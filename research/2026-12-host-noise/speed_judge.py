"""A candidate judge, measured and not adopted: the host's speed as a covariate of each pair.

Problem: the host's speed (host_speed.py) tracks the default scheduler's hot-0 over
identical cells with r = 0.88-0.98 (speed_reference.py), so a judge that took it out
of each pair could be much sharper than refine/measure/stats.py's paired-v4. Sharper is only
better if it stays honest: benchmarks/calibration.py --speeds measures its false verdicts with
this judge in place of stats.compare_arms.

Approach (one level and metric, as stats.compare; the verdict rules are stats' own): each pair
r has d_r = log(candidate_r / reference_r) and s_r = log of the two cells' speed ratio; each A/A
pair e_r and its s'_r. One least-squares fit takes a common slope b out of both: d_r = delta +
b s_r, e_r = b s'_r (the A/A pairs about 0, as in paired-v4). delta is the estimate, its
standard error from the fit at n + m - 2 degrees of freedom (one spent on b), the interval
exp(delta +- t(0.975; df) se). Where a cell has no speed, or the fit leaves b undetermined, the
comparison is stats.compare's. The cells' speeds ride in the Measured structure as a metric of
their own (SPEED), so calibration's draws and mixes carry them with the cells.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import t as student_t

from threadwise.refine.measure import stats
from threadwise.refine.measure.stats import Comparison, Direction, Measured, Noise, Obs

SPEED = "host_speed"   # the pseudo-metric holding each cell's speed index as its value


def _pairs(reference: Mapping[int, Obs], candidate: Mapping[int, Obs], ref_speed: Mapping[int, Obs],
           cand_speed: Mapping[int, Obs]) -> list[tuple[float, float | None]]:
    """(log ratio, log speed ratio or None) of the repeats both have, disturbed pairs left out
    as stats.pair_up leaves them out."""
    out = []
    for r in sorted(set(reference) & set(candidate)):
        ref, cand = reference[r], candidate[r]
        if (ref.denied is not None and cand.denied is not None
                and abs(ref.denied - cand.denied) > stats.PAIR_DENIED_MAX):
            continue
        a, b = ref_speed.get(r), cand_speed.get(r)
        speed = math.log(b.value / a.value) if a and b and a.value > 0 and b.value > 0 else None
        out.append((stats.log_ratio(cand.value, ref.value), speed))
    return out


def fit(pairs: Sequence[tuple[float, float | None]],
        aa: Sequence[tuple[float, float | None]]) -> tuple[float, float, Noise] | None:
    """(delta, its standard error, the residual noise with the slope) or None (see the note)."""
    if not pairs or any(s is None for _, s in (*pairs, *aa)):
        return None
    x = np.array([[1.0, s] for _, s in pairs] + [[0.0, s] for _, s in aa], dtype=float)
    y = np.array([d for d, _ in (*pairs, *aa)], dtype=float)
    df = y.size - 2
    if df < stats.MIN_DF or np.linalg.matrix_rank(x) < 2:
        return None
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ beta
    variance = float(residual @ residual) / df
    se = math.sqrt(variance * float(np.linalg.inv(x.T @ x)[0, 0]))
    return float(beta[0]), se, Noise(math.sqrt(variance), df, len(aa))


def compare_arms(measured: Measured, reference_arm: str, candidate_arm: str, *,
                 primary: tuple[str, Direction], secondary: Sequence[tuple[str, Direction]] = (),
                 twins: tuple[str, str] | None = None,
                 alpha: float = stats.ALPHA) -> stats.LadderComparison:
    """stats.compare_arms with the speed-adjusted comparison wherever every cell has a speed."""
    plain = stats.compare_arms(measured, reference_arm, candidate_arm, primary=primary,
                               secondary=secondary, twins=twins, alpha=alpha)

    def adjusted(c: Comparison) -> Comparison:
        def cells(arm: str | None, metric: str) -> Mapping[int, Obs]:
            return measured.get(arm or "", {}).get(c.level, {}).get(metric, {})

        pairs = _pairs(cells(reference_arm, c.metric), cells(candidate_arm, c.metric),
                       cells(reference_arm, SPEED), cells(candidate_arm, SPEED))
        aa = (_pairs(cells(twins[0], c.metric), cells(twins[1], c.metric),
                     cells(twins[0], SPEED), cells(twins[1], SPEED)) if twins else [])
        got = fit(pairs, aa) if len(pairs) >= stats.MIN_PAIRS else None
        if got is None:
            return c
        delta, se, noise = got
        half = float(student_t.ppf(1.0 - alpha / 2, noise.df)) * se
        low, high = math.exp(delta - half), math.exp(delta + half)
        verdict = stats.classify(low, high, direction=c.direction, pairs=len(pairs), df=noise.df,
                                 ratio=math.exp(delta))
        return Comparison(c.level, c.metric, c.direction, c.reference_median, c.candidate_median,
                          math.exp(delta), low, high, c.n_reference, c.n_candidate, verdict,
                          len(pairs), c.pairs_disturbed, half, noise)

    first = tuple(adjusted(c) for c in plain.primary)
    second = tuple(adjusted(c) for c in plain.secondary)
    wins, reason = stats.ladder_verdict(first, second)
    keep, keep_reason = stats.pareto_verdict(first, second)
    return stats.LadderComparison(reference_arm, candidate_arm, first, second, plain.aa_arm, wins,
                                  reason, keep, keep_reason)


def with_speeds(measured: Measured, speeds: Mapping[tuple[str, int, int], float]) -> Measured:
    """`measured` with each cell's speed as the SPEED metric ((arm, level, repeat) -> speed)."""
    out: Measured = {}
    for arm, levels in measured.items():
        out[arm] = {}
        for level, by_metric in levels.items():
            cells = {r: Obs(v) for (a, lvl, r), v in speeds.items() if a == arm and lvl == level}
            out[arm][level] = {**by_metric, SPEED: cells}
    return out
