"""refine.loop against a deterministic fake ladder: keep only wins, record everything."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from threadwise.errors import ThreadwiseError
from threadwise.refine import mutate
from threadwise.refine.loop import (
    BASELINE,
    BEST,
    CANDIDATE,
    START,
    Arm,
    Decision,
    RefineResult,
    Step,
    refine,
)
from threadwise.refine.mutate import Candidate
from threadwise.refine.stats import (
    Measured,
    Verdict,
    classify,
    compare_arms,
    ladder_verdict,
    noise_floor,
)
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.schema import Profile, Treatment
from threadwise.synthesize.shape import Shape, synthetic

GOLDEN = Path(__file__).parents[1] / "synthesize" / "fixtures" / "golden"
SHAPE = synthetic(4, 2)
LEVELS = (0, 1, 2, 4, 8)
PRIMARY = ("rps", "higher")
SECONDARY = [("p99_ms", "lower")]
vet_without_oracle = partial(mutate.vet, check=lambda specs: [])


def start_profile() -> Profile:
    # the fake ladder keys arms on the comment: drop the golden's compaction note
    return load_profile(GOLDEN / "rolesim.toml")[0].model_copy(update={"comment": None})


def tagged(tag: str, profile: Profile | None = None) -> Profile:
    """A profile the fake ladder recognises by its comment."""
    return (profile or start_profile()).model_copy(update={"comment": f"fx:{tag}"})


class FakeLadder:
    """Synthetic samples: per-arm, per-level means x (1 + 2% seeded gaussian noise).

    An arm's effect is looked up by its profile's comment (`fx:<tag>`; the start
    profile has none, the baseline no profile): rps and p99 factors per level,
    relative to the start profile (baseline: 0.9 x rps and 1.2 x p99 everywhere).
    """

    def __init__(self, rps: dict[str, dict[int, float]] | None = None,
                 p99: dict[str, dict[int, float]] | None = None, repeats: int = 8,
                 sd: float = 0.02) -> None:
        self.rps = {"baseline": dict.fromkeys(LEVELS, 0.9), **(rps or {})}
        self.p99 = {"baseline": dict.fromkeys(LEVELS, 1.2), **(p99 or {})}
        self.repeats, self.sd = repeats, sd
        self.calls: list[list[Arm]] = []

    @staticmethod
    def tag(profile: Profile | None) -> str:
        if profile is None:
            return "baseline"
        return (profile.comment or "fx:start").removeprefix("fx:")

    def __call__(self, arms: list[Arm]) -> Measured:
        call = len(self.calls)
        self.calls.append(list(arms))
        out: Measured = {}
        for k, arm in enumerate(arms):
            tag = self.tag(arm.profile)
            rng = np.random.default_rng([7, call, k])
            out[arm.name] = {}
            for level in LEVELS:
                rps = 1000.0 / (1 + level) * self.rps.get(tag, {}).get(level, 1.0)
                p99 = 2.0 * (1 + level) * self.p99.get(tag, {}).get(level, 1.0)
                noise = 1 + self.sd * rng.standard_normal((2, self.repeats))
                out[arm.name][level] = {"rps": list(rps * noise[0]), "p99_ms": list(p99 * noise[1])}
        return out

    def measured_tags(self) -> list[list[str]]:
        return [[self.tag(a.profile) for a in arms] for arms in self.calls]


def aa_noise() -> float:
    """The fake machine's noise floor, measured the documented way: an A/A ladder."""
    measured = FakeLadder()([Arm("a", None), Arm("b", None)])
    aa = compare_arms(measured, "a", "b", primary=PRIMARY, secondary=SECONDARY, seed=0)
    return noise_floor((*aa.primary, *aa.secondary))


AA_NOISE = aa_noise()


def fixed_candidates(*tags: str, extra: list[Candidate] | None = None):
    """A candidates() that offers the same tagged profiles whatever the best is."""
    seen: list[Profile] = []

    def offer(best: Profile, shape: Shape) -> list[Candidate]:
        seen.append(best)
        return [*(extra or []), *(Candidate(t, f"effect {t}", tagged(t)) for t in tags)]

    offer.seen = seen  # type: ignore[attr-defined]
    return offer


def run(ladder: FakeLadder, candidates, budget: int = 10, noise: float = AA_NOISE,
        **kw: object) -> RefineResult:
    return refine(start_profile(), shape=SHAPE, measure=ladder, primary=PRIMARY,  # type: ignore[arg-type]
                  secondary=SECONDARY, noise=noise, budget=budget, seed=11,  # type: ignore[arg-type]
                  candidates=candidates, vet=vet_without_oracle, **kw)  # type: ignore[arg-type]


def step(result: RefineResult, name: str) -> Step:
    return next(s for s in result.steps if s.candidate == name)


# --- the required cases --------------------------------------------------------------------------


def test_a_better_at_one_level_within_noise_elsewhere_is_kept() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}})
    result = run(ladder, fixed_candidates("up8"))
    kept = step(result, "up8")
    assert kept.decision is Decision.KEPT
    assert kept.vs_best is not None and kept.vs_best.wins
    verdicts = [c.verdict for c in kept.vs_best.primary]
    assert verdicts == [Verdict.WITHIN_NOISE] * 4 + [Verdict.BETTER]
    assert kept.reason.startswith("kept: against the best it wins: rps better at bg=8")
    assert result.best == tagged("up8")


def test_b_better_at_8_but_worse_at_0_is_reverted() -> None:
    ladder = FakeLadder(rps={"trade": {8: 1.15, 0: 0.85}})
    result = run(ladder, fixed_candidates("trade"))
    reverted = step(result, "trade")
    assert reverted.decision is Decision.REVERTED
    assert "rps worse at bg=0" in reverted.reason
    assert "although better at bg=8" in reverted.reason
    assert result.best == start_profile()


def test_c_a_candidate_failing_vet_is_rejected_without_being_measured() -> None:
    start = start_profile()
    twin = Candidate("twin", "a duplicate group", tagged(
        "twin", start.model_copy(update={"groups": [*start.groups[:-1], start.groups[1],
                                                    start.groups[-1]]})))
    ladder = FakeLadder(rps={"up8": {8: 1.15}, "twin": dict.fromkeys(LEVELS, 2.0)})
    result = run(ladder, fixed_candidates("up8", extra=[twin]), budget=1)
    rejected = step(result, "twin")
    assert rejected.decision is Decision.REJECTED
    assert rejected.reason.startswith("rejected before measuring (validate): duplicate_name")
    assert (rejected.measured, rejected.vs_best, rejected.vs_baseline) == (None, None, None)
    assert "twin" not in {t for tags in ladder.measured_tags() for t in tags}
    # a rejection costs no budget: the one measurement went to up8
    assert ladder.measured_tags() == [["baseline", "start"], ["baseline", "start", "up8"]]
    assert result.measured_candidates == 1


def test_d_a_secondary_regression_vetoes_a_primary_win() -> None:
    ladder = FakeLadder(rps={"greedy": {8: 1.15}}, p99={"greedy": {2: 1.3}})
    result = run(ladder, fixed_candidates("greedy"))
    vetoed = step(result, "greedy")
    assert vetoed.decision is Decision.REVERTED
    assert vetoed.vs_best is not None
    assert [c.verdict for c in vetoed.vs_best.primary][-1] is Verdict.BETTER
    assert "secondary p99_ms worse at bg=2" in vetoed.reason
    assert result.best == start_profile()


def test_e_recorded_numbers_recompute_to_the_recorded_decisions() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}, "trade": {8: 1.3, 0: 0.8}, "flat": {},
                             "greedy": {4: 1.2}, "better": {1: 1.2, 2: 1.2, 8: 1.15}},
                        p99={"greedy": {0: 1.4}})
    start = start_profile()
    bad = Candidate("bad", "", start.model_copy(update={"groups": start.groups * 2}))
    result = run(ladder, fixed_candidates("trade", "flat", "up8", "greedy", "better", extra=[bad]),
                 noise=0.03)
    decisions = {s.candidate: s.decision for s in result.steps}
    assert decisions == {START: Decision.KEPT, "bad": Decision.REJECTED, "trade": Decision.REVERTED,
                         "flat": Decision.REVERTED, "up8": Decision.KEPT,
                         "greedy": Decision.REVERTED, "better": Decision.KEPT}
    for s in result.steps:
        if s.decision is Decision.REJECTED:
            continue
        assert s.measured is not None and s.vs_baseline is not None
        comparisons = [s.vs_baseline] + ([s.vs_best] if s.vs_best else [])
        for ladder_cmp in comparisons:
            # each verdict from its recorded CI and noise
            for c in (*ladder_cmp.primary, *ladder_cmp.secondary):
                assert c.noise == 0.03
                assert classify(c.ci_low, c.ci_high, direction=c.direction, noise=c.noise,
                                n_reference=c.n_reference, n_candidate=c.n_candidate) is c.verdict
            # the ladder verdict from the recorded verdicts
            assert ladder_verdict(ladder_cmp.primary, ladder_cmp.secondary) == (
                ladder_cmp.wins, ladder_cmp.reason)
            # and the whole comparison again from the recorded samples and seed
            again = compare_arms(s.measured, ladder_cmp.reference, ladder_cmp.candidate,
                                 primary=PRIMARY, secondary=SECONDARY, noise=ladder_cmp.noise,
                                 seed=ladder_cmp.seed)
            assert again == ladder_cmp
        if s.index > 0:
            assert s.vs_best is not None
            assert (s.decision is Decision.KEPT) == s.vs_best.wins


# --- the loop's mechanics ------------------------------------------------------------------------


def test_step_0_measures_baseline_and_start_and_says_whether_it_wins() -> None:
    ladder = FakeLadder()
    result = run(ladder, fixed_candidates(), budget=0)
    assert [[a.name for a in arms] for arms in ladder.calls] == [[BASELINE, START]]
    assert ladder.calls[0][0].profile is None
    (first,) = result.steps
    assert (first.index, first.candidate, first.decision) == (0, START, Decision.KEPT)
    assert first.vs_best is None
    assert result.start_wins  # the start is 1/0.9 x baseline rps everywhere
    assert "against the baseline it wins: rps better at bg=0" in first.reason
    assert first.diff.startswith("--- /dev/null\n+++ start.toml\n")
    assert json.loads(first.config_json or "")[-1]["name"] == "rest"


def test_a_start_that_loses_to_the_baseline_says_so_and_is_still_the_best() -> None:
    ladder = FakeLadder(rps={"baseline": dict.fromkeys(LEVELS, 1.0)})
    result = run(ladder, fixed_candidates(), budget=0)
    assert not result.start_wins
    assert "against the baseline it does not win: rps better at no level" in result.steps[0].reason
    assert result.best == start_profile()


def test_later_steps_measure_baseline_best_and_candidate_in_one_call() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}})
    result = run(ladder, fixed_candidates("up8", "flat"))
    assert [[a.name for a in arms] for arms in ladder.calls[1:]] == [[BASELINE, BEST, CANDIDATE]] * 2
    assert ladder.measured_tags() == [["baseline", "start"], ["baseline", "start", "up8"],
                                      ["baseline", "up8", "flat"]]  # after a keep, up8 is the best
    assert all(a.shape == SHAPE for arms in ladder.calls for a in arms[1:])
    assert [s.candidate for s in result.steps] == [START, "up8", "flat"]
    assert [s.index for s in result.steps] == [0, 1, 2]


def test_candidates_are_regenerated_from_the_new_best_and_never_retried() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}})
    offer = fixed_candidates("flat", "up8", "down")
    result = run(ladder, offer)
    assert offer.seen == [start_profile(), tagged("up8")]  # type: ignore[attr-defined]
    assert [s.candidate for s in result.steps] == [START, "flat", "up8", "down"]


def test_the_budget_counts_measured_candidates() -> None:
    ladder = FakeLadder()
    result = run(ladder, fixed_candidates("a", "b", "c", "d"), budget=2)
    assert [s.candidate for s in result.steps] == [START, "a", "b"]
    assert result.measured_candidates == 2
    assert len(ladder.calls) == 3
    with pytest.raises(ValueError, match="budget"):
        run(ladder, fixed_candidates(), budget=-1)


def test_the_noise_floor_is_what_a_win_must_beat() -> None:
    assert 0.01 < AA_NOISE < 0.1  # 2% per-window noise, 8 windows per cell
    assert step(run(FakeLadder(rps={"up8": {8: 1.15}}), fixed_candidates("up8")),
                "up8").decision is Decision.KEPT
    noisy = step(run(FakeLadder(rps={"up8": {8: 1.15}}), fixed_candidates("up8"), noise=0.2),
                 "up8")
    assert noisy.decision is Decision.REVERTED
    assert noisy.vs_best is not None and noisy.vs_best.noise == 0.2


def test_every_step_reaches_the_callback_in_order() -> None:
    seen: list[Step] = []
    result = run(FakeLadder(rps={"up8": {8: 1.15}}), fixed_candidates("flat", "up8"),
                 on_step=seen.append)
    assert tuple(seen) == result.steps


def test_the_diff_is_of_the_written_tomls() -> None:
    start = start_profile()
    batch = start.model_copy(update={"groups": [
        start.groups[0].model_copy(update={"treatment": Treatment.BATCH}), *start.groups[1:]]})
    ladder = FakeLadder()
    result = run(ladder, lambda best, shape: [Candidate("hot:treatment=batch", "", batch)])
    diff = step(result, "hot:treatment=batch").diff
    assert diff.startswith("--- best.toml\n+++ hot:treatment=batch.toml\n")
    assert '-treatment = "exclusive"\n' in diff and '+treatment = "batch"\n' in diff


def test_a_reserve_candidate_is_measured_and_kept_on_its_shape() -> None:
    lab = synthetic(2, 1)
    start = start_profile()
    freed = Candidate("reserve_cores=0", "reserve 1 -> 0", tagged("free", start), reserve_cores=0)
    ladder = FakeLadder(rps={"free": {0: 1.2}})
    result = refine(start, shape=lab, measure=ladder, primary=PRIMARY, budget=3, seed=1,
                    noise=AA_NOISE,
                    candidates=lambda best, shape: [freed], vet=vet_without_oracle)
    # the start fails lint on 2x1 (oversubscribed) and is measured anyway, saying so
    assert "lint errors" in result.steps[0].reason and "oversubscribed" in result.steps[0].reason
    assert step(result, "reserve_cores=0").decision is Decision.KEPT
    assert ladder.calls[1][2].shape is not None and ladder.calls[1][2].shape.reserve_cores == 0
    assert ladder.calls[1][1].shape == lab
    assert result.shape.reserve_cores == 0
    assert result.steps[1].reserve_cores == 0


def test_a_start_that_does_not_validate_is_an_error_not_a_step() -> None:
    start = start_profile()
    broken = start.model_copy(update={"groups": start.groups * 2})
    ladder = FakeLadder()
    with pytest.raises(ThreadwiseError, match=r"start profile cannot be measured \(validate\)"):
        refine(broken, shape=SHAPE, measure=ladder, primary=PRIMARY, budget=1, seed=1,
               candidates=fixed_candidates(), vet=vet_without_oracle)
    assert ladder.calls == []


def test_the_loop_is_deterministic() -> None:
    def once() -> RefineResult:
        return run(FakeLadder(rps={"up8": {8: 1.15}, "trade": {8: 1.2, 0: 0.9}}),
                   fixed_candidates("trade", "up8", "flat"))

    assert once() == once()


def test_default_candidates_and_vet_drive_the_loop() -> None:
    """With all_mutations and the real vet (oracle injected), on the golden profile."""
    ladder = FakeLadder()
    result = refine(start_profile(), shape=SHAPE, measure=ladder, primary=PRIMARY, budget=3,
                    seed=2, noise=AA_NOISE, vet=vet_without_oracle)
    names = [c.name for c in mutate.all_mutations(start_profile(), SHAPE)]
    assert [s.candidate for s in result.steps[1:]] == names[: len(result.steps) - 1]
    assert result.measured_candidates == 3
    # the fake gives every profile the same means: nothing can win
    assert all(s.decision is not Decision.KEPT for s in result.steps[1:])
