"""refine.stats on constructed data: CI coverage, verdicts, noise, zero medians, ladder wins."""

from __future__ import annotations

import math

import numpy as np
import pytest

from threadwise.refine.stats import (
    Comparison,
    Direction,
    LadderComparison,
    Measured,
    Seed,
    Verdict,
    cell_seed,
    classify,
    compare,
    compare_arms,
    ladder_verdict,
    noise_floor,
)

# Twelve samples around 100 with a spread of about +-2%: a quiet machine's windows.
BASE = [98.0, 99.0, 100.0, 101.0, 102.0, 99.5, 100.5, 98.5, 101.5, 100.0, 99.0, 101.0]


def scaled(factor: float, values: list[float] = BASE) -> list[float]:
    return [v * factor for v in values]


def shuffled(values: list[float], seed: int) -> list[float]:
    return list(np.random.default_rng(seed).permutation(values))


def cmp(reference: list[float], candidate: list[float], direction: Direction = "higher",
        noise: float = 0.0, seed: Seed = 1, confidence: float = 0.95) -> Comparison:
    return compare(reference, candidate, level=0, metric="m", direction=direction,
                   noise=noise, seed=seed, confidence=confidence)


# --- the CI ---------------------------------------------------------------------------------


def coverage(confidence: float, n: int, trials: int = 200) -> float:
    """Share of seeded trials whose CI holds the true ratio of medians (110/100)."""
    hits = 0
    for trial in range(trials):
        rng = np.random.default_rng([2024, trial])
        reference = rng.normal(100.0, 10.0, n)
        candidate = rng.normal(110.0, 10.0, n)
        c = compare(list(reference), list(candidate), level=0, metric="m", direction="higher",
                    seed=trial, n_boot=1000, confidence=confidence)
        hits += c.ci_low <= 1.1 <= c.ci_high
    return hits / trials


def test_ci_covers_the_true_ratio_at_about_the_nominal_rate() -> None:
    # 200 trials: the binomial sd at 95% is 1.5 points. The percentile bootstrap of a
    # median at n=10 is a little conservative (order statistics), never badly liberal.
    assert 0.90 <= coverage(0.95, n=10) <= 0.995


def test_a_lower_confidence_gives_lower_coverage() -> None:
    # The confidence level is really used: an 80% interval misses the truth more often.
    low, high = coverage(0.80, n=10), coverage(0.95, n=10)
    assert 0.70 <= low <= 0.92
    assert low < high


def test_ci_holds_the_point_ratio_and_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(5)
    few = cmp(list(rng.normal(100, 10, 6)), list(rng.normal(110, 10, 6)))
    many = cmp(list(rng.normal(100, 10, 60)), list(rng.normal(110, 10, 60)))
    for c in (few, many):
        assert c.ci_low <= c.ratio <= c.ci_high
    assert many.ci_high - many.ci_low < few.ci_high - few.ci_low


def test_medians_and_counts_are_recorded() -> None:
    c = cmp([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    assert (c.reference_median, c.candidate_median) == (2.0, 5.0)
    assert c.ratio == 2.5
    assert (c.n_reference, c.n_candidate) == (3, 4)
    assert (c.level, c.metric, c.direction) == (0, "m", "higher")


def test_a_median_ignores_one_stalled_window() -> None:
    stalled = [*BASE[:-1], 5.0]  # one window caught a stall
    c = cmp(BASE, stalled)
    assert c.verdict is Verdict.WITHIN_NOISE
    assert abs(c.ratio - 1) < 0.01


# --- verdicts ---------------------------------------------------------------------------------


def test_higher_is_better_verdicts() -> None:
    assert cmp(BASE, scaled(1.10)).verdict is Verdict.BETTER
    assert cmp(BASE, scaled(0.90)).verdict is Verdict.WORSE
    assert cmp(BASE, shuffled(BASE, 3)).verdict is Verdict.WITHIN_NOISE


def test_lower_is_better_verdicts() -> None:
    assert cmp(BASE, scaled(0.90), "lower").verdict is Verdict.BETTER
    assert cmp(BASE, scaled(1.10), "lower").verdict is Verdict.WORSE
    assert cmp(BASE, shuffled(BASE, 3), "lower").verdict is Verdict.WITHIN_NOISE


def test_noise_margin_turns_a_small_effect_into_within_noise() -> None:
    plain = cmp(BASE, scaled(1.05))
    assert plain.verdict is Verdict.BETTER
    assert plain.ci_low > 1.0
    # a margin larger than the effect: the CI no longer lies wholly beyond 1 + noise
    assert cmp(BASE, scaled(1.05), noise=0.08).verdict is Verdict.WITHIN_NOISE
    assert cmp(BASE, scaled(0.95), noise=0.08).verdict is Verdict.WITHIN_NOISE
    # a margin below the CI's distance from 1 keeps the verdict
    assert cmp(BASE, scaled(1.05), noise=(plain.ci_low - 1) / 2).verdict is Verdict.BETTER
    assert cmp(BASE, scaled(1.05), noise=0.08).noise == 0.08


def test_classify_is_strict_at_the_margin() -> None:
    def verdict(low: float, high: float, direction: Direction = "higher",
                noise: float = 0.1) -> Verdict:
        return classify(low, high, direction=direction, noise=noise,
                        n_reference=5, n_candidate=5)

    assert verdict(1.1, 1.3) is Verdict.WITHIN_NOISE  # touching 1 + noise is not beyond it
    assert verdict(1.1001, 1.3) is Verdict.BETTER
    assert verdict(0.7, 0.9) is Verdict.WITHIN_NOISE
    assert verdict(0.7, 0.8999) is Verdict.WORSE
    assert verdict(0.7, 0.8999, "lower") is Verdict.BETTER
    assert verdict(1.1001, 1.3, "lower") is Verdict.WORSE
    assert verdict(0.95, 1.2) is Verdict.WITHIN_NOISE
    with pytest.raises(ValueError, match="direction"):
        verdict(1.2, 1.3, "up")  # type: ignore[arg-type]


@pytest.mark.parametrize(("n_ref", "n_cand"), [(1, 12), (12, 1), (0, 12), (12, 0), (0, 0)])
def test_fewer_than_two_samples_is_insufficient(n_ref: int, n_cand: int) -> None:
    c = cmp(BASE[:n_ref], scaled(2.0)[:n_cand])
    assert c.verdict is Verdict.INSUFFICIENT
    assert math.isnan(c.ci_low) and math.isnan(c.ci_high)
    assert (c.n_reference, c.n_candidate) == (n_ref, n_cand)
    if n_ref and n_cand:
        # the point estimate is still shown
        assert c.ratio == pytest.approx(np.median(scaled(2.0)[:n_cand]) / np.median(BASE[:n_ref]))
    else:
        assert math.isnan(c.ratio)


def test_two_samples_each_are_enough_for_a_verdict() -> None:
    assert cmp([100.0, 101.0], [200.0, 202.0]).verdict is Verdict.BETTER


# --- determinism --------------------------------------------------------------------------------


def test_same_seed_same_ci_and_other_seed_other_ci() -> None:
    rng = np.random.default_rng(11)
    ref, cand = list(rng.normal(100, 10, 9)), list(rng.normal(105, 10, 9))
    first, again = cmp(ref, cand, seed=42), cmp(ref, cand, seed=42)
    assert first == again
    other = cmp(ref, cand, seed=43)
    assert (other.ci_low, other.ci_high) != (first.ci_low, first.ci_high)
    assert other.ratio == first.ratio  # the point estimate does not depend on the seed


def test_sequence_seeds_work_and_cell_seeds_differ() -> None:
    assert cell_seed(7, 0, "a") != cell_seed(7, 1, "a")
    assert cell_seed(7, 0, "a") != cell_seed(7, 0, "b")
    assert cell_seed([7, 3], 0, "a")[:2] == [7, 3]
    ref, cand = shuffled(BASE, 1), scaled(1.01, shuffled(BASE, 2))
    assert cmp(ref, cand, seed=cell_seed(7, 0, "a")) == cmp(ref, cand, seed=cell_seed(7, 0, "a"))


# --- zero and bad values -----------------------------------------------------------------------


def test_zero_over_zero_is_no_change() -> None:
    c = cmp([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "lower")
    assert c.ratio == 1.0
    assert (c.ci_low, c.ci_high) == (1.0, 1.0)
    assert c.verdict is Verdict.WITHIN_NOISE


def test_positive_over_zero_is_infinite_and_worse_for_a_latency() -> None:
    c = cmp([0.0, 0.0, 0.0, 0.0], [2.0, 3.0, 2.5, 2.0], "lower")
    assert c.ratio == math.inf
    assert c.ci_low == math.inf
    assert c.verdict is Verdict.WORSE
    assert cmp([0.0, 0.0, 0.0, 0.0], [2.0, 3.0, 2.5, 2.0], "higher").verdict is Verdict.BETTER


def test_zero_candidate_median_is_ratio_zero() -> None:
    c = cmp([2.0, 3.0, 2.5, 2.0], [0.0, 0.0, 0.0, 0.0], "lower")
    assert c.ratio == 0.0
    assert c.verdict is Verdict.BETTER


def test_mixed_zeros_give_a_finite_lower_bound() -> None:
    c = cmp([0.0, 0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0], "lower")
    assert c.ratio == 1.0
    assert c.ci_low == 1.0 and c.ci_high == math.inf  # some replicates have a zero reference
    assert c.verdict is Verdict.WITHIN_NOISE


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_negative_and_non_finite_samples_are_errors(bad: float) -> None:
    with pytest.raises(ValueError, match="m at bg=0, candidate"):
        cmp(BASE, [*BASE[:-1], bad])


def test_bad_parameters_are_errors() -> None:
    with pytest.raises(ValueError, match="noise"):
        cmp(BASE, BASE, noise=-0.1)
    with pytest.raises(ValueError, match="confidence"):
        cmp(BASE, BASE, confidence=1.0)


# --- the noise floor ---------------------------------------------------------------------------


def fixed(low: float, high: float, verdict: Verdict = Verdict.WITHIN_NOISE,
          level: int = 0, metric: str = "m") -> Comparison:
    return Comparison(level, metric, "higher", 100.0, 100.0, (low + high) / 2, low, high, 5, 5,
                      verdict)


def test_noise_floor_is_the_largest_bound_distance_from_one() -> None:
    assert noise_floor([fixed(0.97, 1.02), fixed(0.99, 1.05, level=1)]) == pytest.approx(0.05)
    assert noise_floor([fixed(0.90, 1.01)]) == pytest.approx(0.10)


def test_noise_floor_without_comparisons_is_zero() -> None:
    assert noise_floor([]) == 0.0
    insufficient = fixed(math.nan, math.nan, Verdict.INSUFFICIENT)
    assert noise_floor([insufficient]) == 0.0
    assert noise_floor([insufficient, fixed(1.0, math.inf), fixed(0.98, 1.0)]) == pytest.approx(0.02)


def test_noise_floor_of_a_real_aa_ladder_makes_it_within_noise() -> None:
    rng = np.random.default_rng(8)
    aa = [cmp(list(rng.normal(100, 5, 8)), list(rng.normal(100, 5, 8)), seed=level)
          for level in range(5)]
    noise = noise_floor(aa)
    assert 0 < noise < 0.2
    again = [cmp(list(rng.normal(100, 5, 8)), list(rng.normal(100, 5, 8)), noise=noise)
             for _ in range(5)]
    assert sum(c.verdict is Verdict.WITHIN_NOISE for c in again) >= 4


# --- a ladder ----------------------------------------------------------------------------------

LEVELS = (0, 1, 2, 4, 8)


def ladder(factors: dict[int, float], secondary: dict[int, float] | None = None) -> Measured:
    """Arms `ref` and `cand`; cand = ref x factor per level, on metric `rps` (and `p99`)."""
    measured: Measured = {"ref": {}, "cand": {}}
    for level in LEVELS:
        ref = shuffled(BASE, level)
        measured["ref"][level] = {"rps": ref, "p99": scaled(0.02, ref)}
        measured["cand"][level] = {
            "rps": scaled(factors.get(level, 1.0), shuffled(BASE, level + 100)),
            "p99": scaled(0.02 * (secondary or {}).get(level, 1.0), shuffled(BASE, level + 200)),
        }
    return measured


def arms(measured: Measured, noise: float = 0.0, secondary: bool = True) -> LadderComparison:
    return compare_arms(measured, "ref", "cand", primary=("rps", "higher"),
                        secondary=[("p99", "lower")] if secondary else [], noise=noise, seed=3)


def test_better_at_one_level_and_within_noise_elsewhere_wins() -> None:
    result = arms(ladder({8: 1.2}))
    assert result.wins
    assert [c.verdict for c in result.primary] == [Verdict.WITHIN_NOISE] * 4 + [Verdict.BETTER]
    assert result.reason.startswith("wins: rps better at bg=8 1.2")
    assert "bg=0" not in result.reason.split(";")[0]


def test_better_at_8_but_worse_at_0_loses_and_names_both() -> None:
    result = arms(ladder({8: 1.2, 0: 0.85}))
    assert not result.wins
    assert result.reason.startswith("does not win: rps worse at bg=0 0.85")
    assert "although better at bg=8" in result.reason


def test_within_noise_everywhere_loses() -> None:
    result = arms(ladder({}))
    assert not result.wins
    assert "better at no level (within noise at bg=0, bg=1, bg=2, bg=4, bg=8)" in result.reason


def test_secondary_regression_vetoes_a_primary_win() -> None:
    assert arms(ladder({8: 1.2}, {2: 1.0})).wins
    vetoed = arms(ladder({8: 1.2}, {2: 1.3}))
    assert not vetoed.wins
    assert "secondary p99 worse at bg=2" in vetoed.reason
    # a secondary improvement does not make a win by itself
    assert not arms(ladder({}, {2: 0.7})).wins


def test_the_noise_margin_can_take_a_win_away() -> None:
    assert arms(ladder({8: 1.06})).wins
    assert not arms(ladder({8: 1.06}), noise=0.1).wins


def test_insufficient_levels_count_as_neither() -> None:
    measured = ladder({8: 1.2, 0: 0.8})
    measured["cand"][0]["rps"] = measured["cand"][0]["rps"][:1]  # the worse level lost its windows
    result = arms(measured, secondary=False)
    assert result.primary[0].verdict is Verdict.INSUFFICIENT
    assert result.wins
    assert "insufficient samples at rps bg=0" in result.reason
    # all levels insufficient: no win
    for level in LEVELS:
        measured["cand"][level]["rps"] = []
    assert not arms(measured, secondary=False).wins


def test_a_level_only_one_arm_has_is_insufficient() -> None:
    measured = ladder({8: 1.2})
    measured["ref"][16] = {"rps": BASE, "p99": BASE}
    result = arms(measured)
    assert [c.level for c in result.primary] == [*LEVELS, 16]
    assert result.primary[-1].verdict is Verdict.INSUFFICIENT
    missing = compare_arms(measured, "ref", "nobody", primary=("rps", "higher"), seed=1)
    assert not missing.wins
    assert {c.verdict for c in missing.primary} == {Verdict.INSUFFICIENT}


def test_compare_arms_is_deterministic_and_records_its_inputs() -> None:
    measured = ladder({8: 1.2}, {2: 1.3})
    first, again = arms(measured), arms(measured)
    assert first == again
    assert first.noise == 0.0 and first.seed == 3
    assert [c.metric for c in first.secondary] == ["p99"] * len(LEVELS)
    assert first.comparisons("p99") == first.secondary
    assert (first.wins, first.reason) == ladder_verdict(first.primary, first.secondary)


def test_ladder_verdict_rules_on_fixed_verdicts() -> None:
    better, worse = fixed(1.1, 1.2, Verdict.BETTER), fixed(0.8, 0.9, Verdict.WORSE, level=1)
    within = fixed(0.9, 1.1, level=2)
    insufficient = fixed(math.nan, math.nan, Verdict.INSUFFICIENT, level=4)
    assert ladder_verdict([better, within, insufficient])[0]
    assert not ladder_verdict([better, worse])[0]
    assert not ladder_verdict([within, insufficient])[0]
    assert not ladder_verdict([better], [fixed(1.1, 1.3, Verdict.WORSE, metric="p99")])[0]
    assert ladder_verdict([better], [fixed(1.1, 1.3, Verdict.WITHIN_NOISE, metric="p99")])[0]
    assert ladder_verdict([]) == (False, "no primary comparisons (no levels measured)")
