"""refine.stats on constructed data: pairing, same-run per-level noise, verdicts, the keep rule."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from scipy.stats import t as student_t

from threadwise.refine.measure.pairs import paired
from threadwise.refine.measure.stats import (
    ALPHA,
    EARLY_ALPHA,
    LOG_CLIP,
    PAIR_DENIED_MAX,
    RESOLUTION,
    Comparison,
    Direction,
    LadderComparison,
    Measured,
    Noise,
    Obs,
    Verdict,
    aa_floors,
    aa_ratios,
    classify,
    compare,
    compare_arms,
    early_loss,
    keep_decision,
    ladder_verdict,
    log_ratio,
    pair_up,
    pareto_verdict,
    pooled_noise,
)

# A/A log ratios of a quiet level (+-1-3%) and of a loud one (+-20-50%): the same run's noise
QUIET = (0.01, -0.02, 0.03, -0.015)
LOUD = (0.2, -0.5, 0.35, -0.3)


def cells(values: Sequence[float], denied: Sequence[float | None] | None = None) -> dict[int, Obs]:
    """One arm's cells of one level and metric, repeat r = index r."""
    shares = list(denied) if denied is not None else [None] * len(values)
    return {r: Obs(v, d) for r, (v, d) in enumerate(zip(values, shares, strict=True))}


def cmp(reference: Mapping[int, Obs] | Sequence[float], candidate: Mapping[int, Obs] | Sequence[float],
        direction: Direction = "higher", aa: Sequence[float] = QUIET) -> Comparison:
    ref = reference if isinstance(reference, Mapping) else cells(reference)
    cand = candidate if isinstance(candidate, Mapping) else cells(candidate)
    return compare(ref, cand, level=0, metric="m", direction=direction, aa_ratios=aa)


# --- log ratios, zeros and bad values ---------------------------------------------------------


def test_log_ratio_handles_zeros_and_clips() -> None:
    assert log_ratio(0.0, 0.0) == 0.0
    assert log_ratio(5.0, 0.0) == LOG_CLIP
    assert log_ratio(0.0, 5.0) == -LOG_CLIP
    assert log_ratio(1e300, 1e-300) == LOG_CLIP
    assert log_ratio(130.0, 100.0) == pytest.approx(math.log(1.3))


def test_zero_over_zero_is_no_change() -> None:
    c = cmp([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "lower", aa=())
    assert c.ratio == 1.0
    assert (c.ci_low, c.ci_high) == (1.0, 1.0)
    assert c.verdict is Verdict.WITHIN_NOISE


def test_positive_over_zero_is_clipped_and_worse_for_a_latency() -> None:
    c = cmp([0.0, 0.0, 0.0], [2.0, 3.0, 2.5], "lower")
    assert c.ratio == pytest.approx(1e6)
    assert math.isfinite(c.ci_low) and c.ci_low > 1.0
    assert c.verdict is Verdict.WORSE
    assert cmp([0.0, 0.0, 0.0], [2.0, 3.0, 2.5], "higher").verdict is Verdict.BETTER


def test_zero_candidate_is_ratio_near_zero_and_better_for_a_latency() -> None:
    c = cmp([2.0, 3.0, 2.5], [0.0, 0.0, 0.0], "lower")
    assert c.ratio == pytest.approx(1e-6)
    assert c.verdict is Verdict.BETTER


def test_mixed_zeros_keep_the_interval_finite() -> None:
    c = cmp([0.0, 1.0, 1.0], [1.0, 1.0, 1.0], "lower")
    assert math.isfinite(c.ratio)  # the 1/0 pair is clipped at 1e6: it moves the mean ...
    assert math.isfinite(c.ci_low) and math.isfinite(c.ci_high)  # ... and widens the interval
    assert c.ci_low < 1.0 < c.ci_high
    assert c.verdict is Verdict.WITHIN_NOISE


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_negative_and_non_finite_samples_are_errors(bad: float) -> None:
    with pytest.raises(ValueError, match="m at bg=0, candidate"):
        cmp([100.0, 101.0, 99.0], [100.0, 101.0, bad])
    with pytest.raises(ValueError, match="m at bg=0, reference"):
        cmp([100.0, bad, 99.0], [100.0, 101.0, 99.0])


# --- classify and direction ----------------------------------------------------------------------


def test_classify_is_strict_at_one_and_follows_the_direction() -> None:
    def verdict(low: float, high: float, direction: Direction = "higher", pairs: int = 3) -> Verdict:
        return classify(low, high, direction=direction, pairs=pairs)

    assert verdict(1.0, 1.3) is Verdict.WITHIN_NOISE  # touching 1 is not beyond it
    assert verdict(1.0001, 1.3) is Verdict.BETTER
    assert verdict(0.7, 1.0) is Verdict.WITHIN_NOISE
    assert verdict(0.7, 0.9999) is Verdict.WORSE
    assert verdict(0.7, 0.9999, "lower") is Verdict.BETTER
    assert verdict(1.0001, 1.3, "lower") is Verdict.WORSE
    assert verdict(0.95, 1.2) is Verdict.WITHIN_NOISE
    assert verdict(1.1, 1.3, pairs=1) is Verdict.INSUFFICIENT
    with pytest.raises(ValueError, match="direction"):
        verdict(1.2, 1.3, "up")  # type: ignore[arg-type]


def test_a_difference_under_the_resolution_is_within_noise_however_narrow() -> None:
    """The 10-s pool's artefact: a third identical arm 2% below the first in every pair, with a
    pair spread far under 2%. Its interval excludes 1, and it is still no verdict; 6% is one."""
    ref = [2900.0, 2910.0, 2895.0, 2905.0]
    low = cmp(ref, [v * 0.98 for v in ref], "higher")
    assert low.ci_high < 1.0 and low.verdict is Verdict.WITHIN_NOISE
    assert cmp(ref, [v * 0.94 for v in ref], "higher").verdict is Verdict.WORSE
    assert cmp(ref, [v * 1.06 for v in ref], "higher").verdict is Verdict.BETTER
    assert classify(1.01, 1.03, direction="higher", pairs=3, ratio=1.02) is Verdict.WITHIN_NOISE
    assert classify(1.01, 1.09, direction="higher", pairs=3, ratio=1.05) is Verdict.BETTER
    assert 1 - 1 / (1 + RESOLUTION) < 0.05 <= RESOLUTION   # symmetric on the log scale


def test_higher_and_lower_is_better_verdicts() -> None:
    ref = [100.0, 102.0, 98.0, 101.0]
    up, down = [v * 1.1 for v in ref], [v * 0.9 for v in ref]
    assert cmp(ref, up, "higher").verdict is Verdict.BETTER
    assert cmp(ref, down, "higher").verdict is Verdict.WORSE
    assert cmp(ref, up, "lower").verdict is Verdict.WORSE
    assert cmp(ref, down, "lower").verdict is Verdict.BETTER


def test_an_effect_inside_the_noise_is_within_noise() -> None:
    ref = [100.0, 102.0, 98.0, 101.0]
    cand = [v * 1.05 * (1 + 0.01 * i) for i, v in enumerate(ref)]
    assert cmp(ref, cand).verdict is Verdict.BETTER
    inside = cmp(ref, cand, aa=LOUD)
    assert inside.verdict is Verdict.WITHIN_NOISE
    # the interval is Student's t over the pooled noise of one pair, at n pairs
    d = [math.log(c / r) for r, c in zip(ref, cand, strict=True)]
    noise = pooled_noise(d, LOUD)
    assert inside.noise == noise and noise.df == 3 + 4
    half = float(student_t.ppf(0.975, noise.df)) * noise.sd / math.sqrt(4)
    assert inside.floor == pytest.approx(half)
    assert inside.ci_low == pytest.approx(math.exp(np.mean(d) - half))


# --- counts, insufficient -------------------------------------------------------------------------


def test_medians_counts_and_the_paired_ratio_are_recorded() -> None:
    c = cmp([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    assert (c.reference_median, c.candidate_median) == (2.0, 5.0)
    assert c.ratio == pytest.approx(2.0)  # every pair is x2; the unpaired ratio of medians is 2.5
    assert (c.n_reference, c.n_candidate, c.pairs, c.pairs_disturbed) == (3, 4, 3, 0)
    assert (c.level, c.metric, c.direction) == (0, "m", "higher")


@pytest.mark.parametrize(("ref", "cand"), [
    ({0: 100.0}, {0: 200.0}), ({0: 100.0, 1: 101.0}, {1: 202.0, 2: 204.0}),
    ({}, {0: 200.0, 1: 202.0}), ({0: 100.0, 1: 101.0}, {}), ({}, {}), ({0: 100.0}, {1: 200.0})])
def test_fewer_than_two_pairs_is_insufficient(ref: dict[int, float], cand: dict[int, float]) -> None:
    c = cmp({r: Obs(v) for r, v in ref.items()}, {r: Obs(v) for r, v in cand.items()})
    assert c.verdict is Verdict.INSUFFICIENT
    assert math.isnan(c.ci_low) and math.isnan(c.ci_high)
    assert (c.n_reference, c.n_candidate) == (len(ref), len(cand))
    shared = set(ref) & set(cand)
    assert c.pairs == len(shared)
    if shared:  # the point estimate of the one pair is still shown
        assert c.ratio == pytest.approx(2.0)
    else:
        assert math.isnan(c.ratio)
    assert c.describe().startswith(f"bg=0 ({len(shared)} valid pairs")


def test_two_pairs_are_enough_for_a_verdict() -> None:
    c = cmp([100.0, 101.0], [200.0, 202.0])
    assert c.verdict is Verdict.BETTER
    assert c.describe().startswith("bg=0 2 [1.9")


def test_without_an_aa_arm_two_pairs_have_too_few_degrees_of_freedom() -> None:
    """The pairs' own residuals alone: n - 1 degrees of freedom; 2 pairs give 1, no interval."""
    alone = cmp([100.0, 101.0], [200.0, 202.0], aa=())
    assert alone.verdict is Verdict.INSUFFICIENT and alone.noise.df == 1
    assert cmp([100.0, 101.0, 99.0], [200.0, 203.0, 197.0], aa=()).verdict is Verdict.BETTER


# --- pairing ---------------------------------------------------------------------------------------


def test_pairs_cancel_common_drift_where_unpaired_spreads_overlap() -> None:
    reference = [100.0, 200.0, 400.0]  # the host drifted 4x across the repeats
    candidate = [130.0, 260.0, 520.0]  # the candidate is 1.3x in every repeat
    assert min(candidate) < max(reference) and min(reference) < max(candidate)  # spreads overlap
    c = cmp(reference, candidate)
    assert c.verdict is Verdict.BETTER
    assert c.ratio == pytest.approx(1.3)
    assert c.pairs == 3
    # the same cells paired the other way round (drift no longer common) are not a clear effect
    crossed = cmp(reference, candidate[::-1])
    assert crossed.verdict is Verdict.WITHIN_NOISE


def test_a_repeat_missing_in_one_arm_is_not_paired() -> None:
    reference = cells([100.0, 200.0, 400.0])
    candidate = {0: Obs(130.0), 2: Obs(520.0)}  # repeat 1's candidate cell was invalid
    ratios, disturbed = pair_up(reference, candidate)
    assert ratios == pytest.approx([math.log(1.3)] * 2)
    assert disturbed == 0
    c = cmp(reference, candidate)
    assert (c.pairs, c.n_reference, c.n_candidate) == (2, 3, 2)
    assert c.verdict is Verdict.BETTER
    # a reference cell pairs only with the candidate's cell of the same repeat, never another one
    shifted = {1: Obs(130.0), 2: Obs(260.0)}
    assert pair_up(reference, shifted)[0] == pytest.approx([math.log(130 / 200), math.log(260 / 400)])


def test_a_pair_the_host_denied_unequally_is_left_out_and_counted() -> None:
    reference = cells([100.0, 100.0, 100.0], denied=[0.0, 0.0, 0.0])
    # repeat 2's candidate cell lost 30% of its vCPU time to the host and halved
    candidate = cells([130.0, 130.0, 50.0], denied=[0.0, 0.02, 0.3])
    ratios, disturbed = pair_up(reference, candidate)
    assert ratios == pytest.approx([math.log(1.3)] * 2)
    assert disturbed == 1
    c = cmp(reference, candidate)
    assert (c.pairs, c.pairs_disturbed) == (2, 1)
    assert c.verdict is Verdict.BETTER
    # the same cells without the host's readings: the halved pair stays in and widens the interval
    blind = cmp(cells([100.0] * 3), cells([130.0, 130.0, 50.0]))
    assert (blind.pairs, blind.pairs_disturbed) == (3, 0)
    assert blind.verdict is Verdict.WITHIN_NOISE


def test_the_denied_threshold_is_a_difference_of_shares() -> None:
    ref = {0: Obs(100.0, 0.5)}
    assert pair_up(ref, {0: Obs(100.0, 0.5 + PAIR_DENIED_MAX * 0.9)}) == ([0.0], 0)
    assert pair_up(ref, {0: Obs(100.0, 0.5 - PAIR_DENIED_MAX * 1.1)}) == ([], 1)
    assert pair_up(ref, {0: Obs(100.0, None)}) == ([0.0], 0)  # no reading: not judged disturbed
    assert pair_up({0: Obs(100.0, 0.9)}, {0: Obs(100.0, 0.9)}) == ([0.0], 0)  # equally denied


# --- the noise: the same run, the same level --------------------------------------------------------


def test_pooled_noise_is_the_residuals_and_the_aa_ratios_about_zero() -> None:
    d, e = [0.1, 0.2, 0.3], [0.05, -0.05]
    noise = pooled_noise(d, e)
    assert noise.df == 2 + 2 and noise.aa_pairs == 2
    assert noise.sd == pytest.approx(math.sqrt((0.01 + 0.0 + 0.01 + 0.0025 + 0.0025) / 4))
    assert pooled_noise([], e).df == 2  # the A/A pairs alone (a report's floor)
    assert pooled_noise([0.1], []).df == 0


def test_a_candidate_whose_pairs_disagree_is_within_noise_despite_a_quiet_aa() -> None:
    reference = [100.0, 100.0, 100.0]
    wild = cmp(reference, [80.0, 160.0, 130.0])  # pairs 0.8x, 1.6x, 1.3x
    assert wild.verdict is Verdict.WITHIN_NOISE
    assert wild.noise.sd > 0.1
    steady = cmp(reference, [129.0, 131.0, 130.0])
    assert steady.verdict is Verdict.BETTER


def test_a_consistent_loss_in_every_pair_is_worse() -> None:
    """issue 35: rolesim's worker p99 at bg=0 read 1.17-1.34x worse in 3 of 3 pairs while that
    level's own A/A gaps were at most 1.16x; the pooled judge of the day called it within noise."""
    reference = [154.0, 160.0, 150.0]
    candidate = [r * f for r, f in zip(reference, (1.17, 1.34, 1.31), strict=True)]
    aa = [math.log(x) for x in (1.16, 0.93, 1.05)]
    c = cmp(reference, candidate, "lower", aa=aa)
    assert c.verdict is Verdict.WORSE


def test_a_loud_level_does_not_widen_a_quiet_levels_interval() -> None:
    """Each level's noise is its own A/A pairs: making another level's A/A arm louder changes
    nothing at this level."""
    def run(loud_factor: float) -> LadderComparison:
        measured: Measured = {"baseline": {}, "baseline-aa": {}, "cand": {}}
        for level, aa_log in ((0, QUIET), (2, [x * loud_factor for x in LOUD])):
            measured["baseline"][level] = {"m": cells([100.0] * 4)}
            measured["baseline-aa"][level] = {"m": cells([100.0 * math.exp(x) for x in aa_log])}
            measured["cand"][level] = {"m": cells([110.0, 111.0, 109.0, 110.5])}
        return compare_arms(measured, "baseline", "cand", primary=("m", "higher"),
                            twins=("baseline", "baseline-aa"))
    calm, louder = run(1.0), run(3.0)
    assert calm.primary[0] == louder.primary[0]  # bg=0: identical interval and verdict
    assert calm.primary[0].verdict is Verdict.BETTER
    assert louder.primary[1].floor > calm.primary[1].floor  # bg=2 widened by its own A/A only
    assert calm.primary[1].verdict is Verdict.WITHIN_NOISE


def test_the_noise_comes_from_the_run_measured() -> None:
    """compare_arms reads the A/A arm of the Measured it judges (one run) and nothing else: the
    same comparison with another run's A/A arm gives another interval."""
    def run(aa_log: Sequence[float]) -> Measured:
        return {"baseline": {0: {"m": cells([100.0] * 4)}},
                "baseline-aa": {0: {"m": cells([100.0 * math.exp(x) for x in aa_log])}},
                "cand": {0: {"m": cells([108.0, 109.0, 107.0, 108.5])}}}
    quiet_run, loud_run = run(QUIET), run(LOUD)
    twins = ("baseline", "baseline-aa")
    assert aa_ratios(quiet_run, twins, 0, "m") == pytest.approx(list(QUIET))
    assert compare_arms(quiet_run, "baseline", "cand", primary=("m", "higher"),
                        twins=twins).primary[0].verdict is Verdict.BETTER
    assert compare_arms(loud_run, "baseline", "cand", primary=("m", "higher"),
                        twins=twins).primary[0].verdict is Verdict.WITHIN_NOISE
    floors = aa_floors(loud_run, *twins, ["m"])
    # the A/A pairs alone, scaled to a pair against both default cells; one metric at one level
    assert floors.by_level["m"][0].sd == pytest.approx(math.sqrt(0.75) * pooled_noise([], list(LOUD)).sd)
    assert floors.floor("m", 3, 0) == pytest.approx(Noise(floors.by_level["m"][0].sd, 4, 4).half_width(3))
    # two metrics at one level: each floor at alpha / 2, as the verdicts' intervals
    two = aa_floors(loud_run, *twins, ["m", "m"])
    half = Noise(floors.by_level["m"][0].sd, 4, 4).half_width(3, ALPHA / 2)
    assert two.floor("m", 3, 0) == pytest.approx(half)


def test_aa_pairs_the_host_disturbed_are_left_out_as_the_comparison_leaves_them() -> None:
    measured: Measured = {
        "baseline": {0: {"m": cells([100.0] * 4, denied=[0.0] * 4)}},
        "baseline-aa": {0: {"m": cells([101.0, 99.0, 40.0, 100.5], denied=[0.0, 0.0, 0.4, 0.0])}}}
    assert len(aa_ratios(measured, ("baseline", "baseline-aa"), 0, "m")) == 3


def test_the_same_data_gives_the_same_interval_regardless_of_order() -> None:
    a = cmp(cells([100.0, 101.0, 99.0]), cells([110.0, 108.0, 111.0]))
    b = cmp({2: Obs(99.0), 0: Obs(100.0), 1: Obs(101.0)}, {1: Obs(108.0), 2: Obs(111.0), 0: Obs(110.0)})
    assert a == b



# --- paired-v5: the default scheduler's two cells, simultaneous intervals ---------------------------

TWINS = ("baseline", "baseline-aa")


def three_arms(base: Sequence[float], twin: Sequence[float], cand: Sequence[float]) -> Measured:
    return {"baseline": {0: {"m": cells(base)}}, "baseline-aa": {0: {"m": cells(twin)}},
            "cand": {0: {"m": cells(cand)}}}


def test_the_default_schedulers_side_is_the_geometric_mean_of_its_two_cells() -> None:
    base, twin, cand = [100.0, 90.0, 110.0, 95.0], [104.0, 88.0, 112.0, 99.0], [120.0, 101.0, 131.0, 110.0]
    measured = three_arms(base, twin, cand)
    c = compare_arms(measured, "baseline", "cand", primary=("m", "higher"), twins=TWINS).primary[0]
    d = [math.log(x / math.sqrt(b * t)) for b, t, x in zip(base, twin, cand, strict=True)]
    assert c.ratio == pytest.approx(math.exp(np.mean(d)))
    # the A/A squares scaled to a pair against two cells: 1.5 s_c^2 against 2 s_c^2
    e = [math.log(t / b) for b, t in zip(base, twin, strict=True)]
    squares = sum((x - np.mean(d)) ** 2 for x in d) + 0.75 * sum(x * x for x in e)
    assert c.noise.sd == pytest.approx(math.sqrt(squares / (len(d) - 1 + len(e))))
    assert c.noise.df == len(d) - 1 + len(e) and c.noise.aa_pairs == len(e)
    # the default on the candidate's side is the mirror image
    mirror = compare_arms(measured, "cand", "baseline", primary=("m", "higher"), twins=TWINS).primary[0]
    assert mirror.ratio == pytest.approx(1 / c.ratio) and mirror.noise == c.noise
    # the A/A check (baseline -> its twin) stays one cell against one
    check = compare_arms(measured, "baseline", "baseline-aa", primary=("m", "higher"), twins=TWINS).primary[0]
    assert check.ratio == pytest.approx(math.exp(np.mean(e)))
    # without twins (a run with no A/A arm) the baseline's cells alone, its own residuals
    alone = compare_arms(measured, "baseline", "cand", primary=("m", "higher")).primary[0]
    plain = [math.log(x / b) for b, x in zip(base, cand, strict=True)]
    assert alone.ratio == pytest.approx(math.exp(np.mean(plain)))
    assert alone.noise.df == 3 and alone.noise.aa_pairs == 0


def test_a_repeat_with_one_default_cell_uses_it_and_counts_its_variance() -> None:
    measured = three_arms([100.0, 90.0, 110.0], [104.0, 88.0, 112.0], [120.0, 101.0, 131.0])
    del measured["baseline"][0]["m"][1]  # repeat 1: the twin's cell alone
    pairs = paired(measured["baseline"][0]["m"], measured["cand"][0]["m"],
                   twin=measured["baseline-aa"][0]["m"])
    assert pairs.ratios[1] == pytest.approx(math.log(101.0 / 88.0))
    assert pairs.scale == pytest.approx((0.75 + 1.0 + 0.75) / 3)
    # a default cell the host denied apart from the candidate's is left out of the mean
    denied = paired({0: Obs(100.0, 0.0)}, {0: Obs(120.0, 0.0)}, twin={0: Obs(50.0, 0.5)})
    assert denied.ratios == [pytest.approx(math.log(1.2))] and denied.scale == 1.0
    both_out = paired({0: Obs(100.0, 0.5)}, {0: Obs(120.0, 0.0)}, twin={0: Obs(50.0, 0.5)})
    assert both_out.ratios == [] and both_out.disturbed == 1


def test_an_arm_pairs_intervals_hold_together_each_at_alpha_over_k() -> None:
    measured = ladder({8: 1.2})
    result = arms(measured)
    k = len(LEVELS) * 2
    assert result.each_alpha == pytest.approx(ALPHA / k)
    c = result.primary[-1]
    assert c.floor == pytest.approx(c.noise.half_width(c.pairs, ALPHA / k))
    one_metric = arms(ladder({8: 1.2}), secondary=False)
    assert one_metric.each_alpha == pytest.approx(ALPHA / len(LEVELS))
    alone = compare_arms(measured, "baseline", "cand", primary=("rps", "higher"), twins=TWINS,
                         simultaneous=False)
    assert alone.each_alpha == ALPHA and alone.primary[-1].floor < c.floor

# --- a ladder: verdict against the default, keep rule -----------------------------------------------

LEVELS = (0, 1, 2, 4, 8)
DRIFT = (1.0, 0.6, 1.5, 0.8)  # the host's slow drift per repeat, common to the arms of a repeat


def ladder(rps: Mapping[int, float] | None = None, p99: Mapping[int, float] | None = None,
           *, missing: Mapping[int, int] | None = None) -> Measured:
    """Arms `baseline`, `baseline-aa` and `cand` with the host's drift per repeat; the A/A arm is
    the baseline times a seeded jitter (+-2%: the run's noise); cand is the baseline times a factor
    per level on `rps` (and `p99`), exactly, so an effect is the only difference it has. `missing`
    drops cand's cells of a level after that many repeats."""
    rng = np.random.default_rng(5)
    measured: Measured = {"baseline": {}, "baseline-aa": {}, "cand": {}}
    for level in LEVELS:
        base = {"rps": [1000.0 / (1 + level) * d for d in DRIFT],
                "p99": [2.0 * (1 + level) * d for d in DRIFT]}
        jitter = {m: 1 + 0.02 * np.clip(rng.standard_normal(len(DRIFT)), -1.5, 1.5) for m in base}
        keep = (missing or {}).get(level, len(DRIFT))
        factor = {"rps": (rps or {}).get(level, 1.0), "p99": (p99 or {}).get(level, 1.0)}
        measured["baseline"][level] = {m: {r: Obs(v) for r, v in enumerate(values)}
                                       for m, values in base.items()}
        measured["baseline-aa"][level] = {m: {r: Obs(v * jitter[m][r]) for r, v in enumerate(values)}
                                          for m, values in base.items()}
        measured["cand"][level] = {m: {r: Obs(v * factor[m]) for r, v in enumerate(values) if r < keep}
                                   for m, values in base.items()}
    return measured


def arms(measured: Measured, secondary: bool = True) -> LadderComparison:
    return compare_arms(measured, "baseline", "cand", primary=("rps", "higher"),
                        secondary=[("p99", "lower")] if secondary else [],
                        twins=("baseline", "baseline-aa"))


def test_better_at_one_level_and_within_noise_elsewhere_wins_and_is_kept() -> None:
    result = arms(ladder({8: 1.2}))
    assert [c.verdict for c in result.primary] == [Verdict.WITHIN_NOISE] * 4 + [Verdict.BETTER]
    assert {c.verdict for c in result.secondary} == {Verdict.WITHIN_NOISE}
    assert result.wins and result.keep and result.decided
    assert result.reason.startswith("wins: rps better at bg=8 1.2")


def test_better_at_8_but_worse_at_0_neither_wins_nor_is_kept() -> None:
    result = arms(ladder({8: 1.2, 0: 0.8}))
    assert not result.wins and not result.keep
    assert "rps worse at bg=0" in result.reason


def test_within_noise_everywhere_neither_wins_nor_is_kept() -> None:
    result = arms(ladder())
    assert not result.wins and not result.keep
    assert "every metric within noise" in result.keep_reason


def test_a_latency_fix_with_the_primary_within_noise_is_kept_but_does_not_win() -> None:
    result = arms(ladder(p99={2: 0.7}))
    assert result.keep and not result.wins


def test_a_primary_gain_that_worsens_a_secondary_is_reverted_and_does_not_win() -> None:
    result = arms(ladder({2: 1.3}, {2: 1.4}))
    assert not result.keep and not result.wins
    assert "p99 worse at bg=2" in result.reason


def test_an_insufficient_comparison_fails_a_keep_and_leaves_a_win_undecided() -> None:
    """issue 35: poolservice's step 7 was kept on bg=0 alone with 6 of 8 comparisons insufficient."""
    result = arms(ladder({0: 1.3}, missing={2: 1, 4: 1}))  # one pair left at bg=2 and bg=4
    insufficient = [c for c in (*result.primary, *result.secondary) if c.verdict is Verdict.INSUFFICIENT]
    assert len(insufficient) == 4 and not result.decided
    assert not result.keep and "not decided" in result.keep_reason
    assert not result.wins and result.reason.startswith("not decided: ")
    assert "insufficient at rps bg=2" in result.reason


def test_a_level_only_one_arm_has_is_insufficient() -> None:
    measured = ladder({8: 1.2})
    del measured["cand"][4]
    result = arms(measured)
    assert result.primary[3].verdict is Verdict.INSUFFICIENT and not result.wins


def test_compare_arms_is_deterministic_and_records_its_inputs() -> None:
    first, again = arms(ladder({8: 1.2})), arms(ladder({8: 1.2}))
    assert first == again
    assert first.aa_arm == "baseline-aa"
    assert all(c.noise.aa_pairs == len(DRIFT) for c in first.primary)


def test_early_loss_needs_a_loss_to_both_the_best_and_the_default() -> None:
    rng = np.random.default_rng(9)

    def run(cand_factor: float, best_factor: float) -> Measured:
        measured: Measured = {arm: {0: {"m": {}}} for arm in ("baseline", "baseline-aa", "best", "cand")}
        for r in range(3):
            base = 100.0 * (1 + 0.3 * r)
            for arm, factor in (("baseline", 1.0), ("baseline-aa", 1.0), ("best", best_factor),
                                ("cand", cand_factor)):
                measured[arm][0]["m"][r] = Obs(base * factor * float(np.exp(rng.normal(0, 0.005))))
        return measured

    kwargs = {"baseline": "baseline", "best": "best", "candidate": "cand",
              "twins": ("baseline", "baseline-aa"), "primary": ("m", "higher")}
    lost = early_loss(run(0.4, 1.0), **kwargs)  # type: ignore[arg-type]
    assert lost is not None and "worse than the best and the default scheduler at m bg=0" in lost
    assert f"alpha {EARLY_ALPHA}" in lost
    assert early_loss(run(0.97, 1.0), **kwargs) is None  # a small loss waits for the whole run
    # worse than the best, but the best beat the default by more: no loss to the default, no stop
    assert early_loss(run(1.5, 2.5), **kwargs) is None  # type: ignore[arg-type]


# --- the verdict rules on fixed verdicts -----------------------------------------------------------


def fixed(verdict: Verdict, level: int = 0, metric: str = "m") -> Comparison:
    bounds = {Verdict.BETTER: (1.1, 1.2), Verdict.WORSE: (0.8, 0.9), Verdict.WITHIN_NOISE: (0.9, 1.1),
              Verdict.INSUFFICIENT: (math.nan, math.nan)}[verdict]
    return Comparison(level, metric, "higher", 100.0, 100.0, sum(bounds) / 2, *bounds, 3, 3, verdict,
                      pairs=0 if verdict is Verdict.INSUFFICIENT else 3)


def test_ladder_verdict_rules_on_fixed_verdicts() -> None:
    better, worse = fixed(Verdict.BETTER), fixed(Verdict.WORSE, level=1)
    within, insufficient = fixed(Verdict.WITHIN_NOISE, level=2), fixed(Verdict.INSUFFICIENT, level=4)
    assert ladder_verdict([better, within])[0]
    undecided = ladder_verdict([better, within, insufficient])
    assert not undecided[0] and undecided[1].startswith("not decided: ")  # insufficient: no win
    assert not ladder_verdict([better, worse])[0]
    assert not ladder_verdict([within, insufficient])[0]
    assert not ladder_verdict([better], [fixed(Verdict.WORSE, metric="p99")])[0]
    assert ladder_verdict([better], [fixed(Verdict.WITHIN_NOISE, metric="p99")])[0]
    # a better secondary does not make a win by itself
    assert not ladder_verdict([within], [fixed(Verdict.BETTER, metric="p99")])[0]
    assert ladder_verdict([]) == (False, "no primary comparisons (no levels measured)")


def test_pareto_verdict_rules_on_fixed_verdicts() -> None:
    better, worse = fixed(Verdict.BETTER), fixed(Verdict.WORSE, level=1)
    within, insufficient = fixed(Verdict.WITHIN_NOISE, level=2), fixed(Verdict.INSUFFICIENT, level=4)
    p99_better, p99_worse = fixed(Verdict.BETTER, metric="p99"), fixed(Verdict.WORSE, metric="p99")
    assert pareto_verdict([within], [p99_better])[0]  # a secondary fix while the primary holds
    assert pareto_verdict([better, within])[0]
    assert not pareto_verdict([better, within, insufficient])[0]  # insufficient is no evidence
    assert not pareto_verdict([better], [p99_worse])[0]  # a gain that costs a secondary
    assert not pareto_verdict([better, worse])[0]
    assert not pareto_verdict([within, insufficient], [fixed(Verdict.WITHIN_NOISE, metric="p99")])[0]
    assert not pareto_verdict([insufficient])[0]
    assert pareto_verdict([]) == (False, "no comparisons (no levels measured)")


def ladder_of(primary: list[Comparison], secondary: Sequence[Comparison] = ()) -> LadderComparison:
    wins, reason = ladder_verdict(primary, secondary)
    keep, keep_reason = pareto_verdict(primary, secondary)
    return LadderComparison("ref", "cand", tuple(primary), tuple(secondary), "baseline-aa", wins, reason,
                            keep, keep_reason)


def test_keep_decision_trades_a_loss_against_the_default_for_part_of_a_win() -> None:
    """rolesim's case: the best wins hot under background but loses worker p99 at bg=0; the
    candidate no longer loses at bg=0 and gives back part of the p99 gain at bg=2 (worse than
    the best there, still not worse than the default)."""
    hot_better = [fixed(Verdict.WITHIN_NOISE, 0, "hot"), fixed(Verdict.BETTER, 2, "hot")]
    best = ladder_of(hot_better, [fixed(Verdict.WORSE, 0, "p99"), fixed(Verdict.BETTER, 2, "p99")])
    fixed_bg0 = ladder_of(hot_better,
                          [fixed(Verdict.WITHIN_NOISE, 0, "p99"), fixed(Verdict.BETTER, 2, "p99")])
    vs_best = ladder_of([fixed(Verdict.WITHIN_NOISE, 0, "hot"), fixed(Verdict.WITHIN_NOISE, 2, "hot")],
                        [fixed(Verdict.BETTER, 0, "p99"), fixed(Verdict.WORSE, 2, "p99")])
    assert not vs_best.keep  # the Pareto rule alone reverts it
    kept, why = keep_decision(vs_best, best, fixed_bg0)
    assert kept and why.startswith("keep by the trade rule") and "p99 at bg=0 no longer worse" in why
    # the loss gone against the default but within noise of the best there: no progress, reverted
    same = ladder_of([fixed(Verdict.WITHIN_NOISE, 0, "hot"), fixed(Verdict.WITHIN_NOISE, 2, "hot")],
                     [fixed(Verdict.WITHIN_NOISE, 0, "p99"), fixed(Verdict.WITHIN_NOISE, 2, "p99")])
    assert not keep_decision(same, best, fixed_bg0)[0]
    # a new loss anywhere: reverted, with the Pareto rule's reason
    new_loss = ladder_of([fixed(Verdict.WORSE, 0, "hot"), fixed(Verdict.BETTER, 2, "hot")],
                         [fixed(Verdict.WITHIN_NOISE, 0, "p99"), fixed(Verdict.BETTER, 2, "p99")])
    assert keep_decision(vs_best, best, new_loss) == (False, vs_best.keep_reason)
    # worse than the best where it also loses to the default (a loss deepened, not a win given
    # back; poolservice's step 8 in artifacts/): reverted
    deeper = ladder_of([fixed(Verdict.WORSE, 0, "hot"), fixed(Verdict.WITHIN_NOISE, 2, "hot")],
                       [fixed(Verdict.BETTER, 0, "p99")])
    loses_hot = ladder_of([fixed(Verdict.WORSE, 0, "hot"), fixed(Verdict.BETTER, 2, "hot")],
                          [fixed(Verdict.WORSE, 0, "p99")])
    fixes_p99 = ladder_of([fixed(Verdict.WORSE, 0, "hot"), fixed(Verdict.BETTER, 2, "hot")],
                          [fixed(Verdict.WITHIN_NOISE, 0, "p99")])
    assert not keep_decision(deeper, loses_hot, fixes_p99)[0]
    # still worse than the default at bg=0 but judged better than the best there: kept ...
    kept, why = keep_decision(vs_best, best, best)
    assert kept and "p99 at bg=0 less worse" in why
    # ... and within noise of the best there (no progress on any loss): reverted
    noisy = ladder_of(list(vs_best.primary),
                      [fixed(Verdict.WITHIN_NOISE, 0, "p99"), fixed(Verdict.WORSE, 2, "p99")])
    assert not keep_decision(noisy, best, best)[0]
    # a loss removed but the primary's win given up: reverted
    no_win = ladder_of([fixed(Verdict.WITHIN_NOISE, 0, "hot"), fixed(Verdict.WITHIN_NOISE, 2, "hot")],
                       [fixed(Verdict.WITHIN_NOISE, 0, "p99"), fixed(Verdict.WITHIN_NOISE, 2, "p99")])
    assert not keep_decision(vs_best, best, no_win)[0]
    # a Pareto keep stays a keep whatever the baseline says
    pareto = ladder_of([fixed(Verdict.BETTER, 0, "hot")])
    assert keep_decision(pareto, best, best) == (True, pareto.keep_reason)

