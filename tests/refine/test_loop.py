"""refine.loop against a deterministic fake ladder: keep by the Pareto rule, record everything."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from threadwise.errors import LabError, ThreadwiseError
from threadwise.refine.measure.plan import AA_ARM
from threadwise.refine.measure.stats import (
    Measured,
    Obs,
    Verdict,
    aa_floors,
    classify,
    compare_arms,
    ladder_verdict,
    pareto_verdict,
)
from threadwise.refine.search import mutate, vetting
from threadwise.refine.search.diagnose import Blocker, Silence
from threadwise.refine.search.loop import (
    BASELINE,
    BEST,
    CANDIDATE,
    START,
    Arm,
    Decision,
    Metric,
    RefineResult,
    Step,
    refine,
)
from threadwise.refine.search.mutate import Candidate
from threadwise.shape import Shape, synthetic
from threadwise.synthesize import vet as synthesize_vet
from threadwise.synthesize.reader import load_profile, parse_profile
from threadwise.synthesize.schema import CatchAll, Profile, Treatment

GOLDEN = Path(__file__).parents[1] / "synthesize" / "fixtures" / "golden"
SHAPE = synthetic(4, 2)
LEVELS = (0, 1, 2, 4, 8)
PRIMARY: Metric = ("rps", "higher")
SECONDARY: list[Metric] = [("p99_ms", "lower")]
METRICS = [PRIMARY[0], *(m for m, _ in SECONDARY)]
vet_without_oracle = partial(vetting.vet, check=lambda specs, args: [])


def start_profile() -> Profile:
    # the fake ladder keys arms on the comment: drop the golden's compaction note
    return load_profile(GOLDEN / "rolesim.toml")[0].model_copy(update={"comment": None})


def tagged(tag: str, profile: Profile | None = None) -> Profile:
    """A profile the fake ladder recognises by its comment."""
    return (profile or start_profile()).model_copy(update={"comment": f"fx:{tag}"})


class FakeLadder:
    """Synthetic cells: per-arm, per-level means x the host's drift x (1 + sd gaussian jitter).

    An arm's effect is looked up by its profile's comment (`fx:<tag>`; the start
    profile has none, the baseline no profile): rps and p99 factors per level,
    relative to the start profile (baseline: 0.9 x rps and 1.2 x p99 everywhere).
    Every arm runs each level once per repeat; the host's slow drift (+-30%) is
    one factor per call, repeat and level shared by every arm, as in an ABBA
    ladder whose arms of one repeat run seconds apart. The jitter is seeded by
    call and arm position, so the ladder is deterministic.
    """

    def __init__(self, rps: dict[str, dict[int, float]] | None = None,
                 p99: dict[str, dict[int, float]] | None = None, repeats: int = 4,
                 sd: float = 0.02) -> None:
        self.rps = {"baseline": dict.fromkeys(LEVELS, 0.9), **(rps or {})}
        self.p99 = {"baseline": dict.fromkeys(LEVELS, 1.2), **(p99 or {})}
        self.repeats, self.sd = repeats, sd
        self.calls: list[list[Arm]] = []

    @staticmethod
    def tag(arm: Arm) -> str:
        if arm.profile_toml is None:
            return "baseline"
        return (measured_profile(arm).comment or "fx:start").removeprefix("fx:")

    def __call__(self, arms: list[Arm]) -> Measured:
        call = len(self.calls)
        self.calls.append(list(arms))
        drift = np.exp(0.3 * np.random.default_rng([7, call]).standard_normal((len(LEVELS), self.repeats)))
        out: Measured = {}
        for k, arm in enumerate(arms):
            tag = self.tag(arm)
            rng = np.random.default_rng([7, call, k])
            out[arm.name] = {}
            for i, level in enumerate(LEVELS):
                rps = 1000.0 / (1 + level) * self.rps.get(tag, {}).get(level, 1.0)
                p99 = 2.0 * (1 + level) * self.p99.get(tag, {}).get(level, 1.0)
                jitter = 1 + self.sd * rng.standard_normal((2, self.repeats))
                out[arm.name][level] = {
                    "rps": {r: Obs(rps * drift[i, r] * jitter[0, r], 0.0) for r in range(self.repeats)},
                    "p99_ms": {r: Obs(p99 * drift[i, r] * jitter[1, r], 0.0) for r in range(self.repeats)},
                }
        return out

    def measured_tags(self) -> list[list[str]]:
        return [[self.tag(a) for a in arms] for arms in self.calls]


def measured_profile(arm: Arm) -> Profile:
    """The profile a ladder arm measures, read back from its TOML (what the ladder file keeps)."""
    assert arm.profile_toml is not None
    return parse_profile(arm.profile_toml)[0]


def compiled_on(arm: Arm, shape: Shape) -> bool:
    """Whether the arm's config is its profile compiled for `shape` (the shape it is measured on)."""
    return arm.config == synthesize_vet.compiled_config(measured_profile(arm), shape)[0]


TWINS = (BASELINE, AA_ARM)

Offer = Callable[[Profile, Shape], list[Candidate]]


def fixed_candidates(*tags: str, extra: list[Candidate] | None = None) -> Offer:
    """A candidates() that offers the same tagged profiles whatever the best is."""
    seen: list[Profile] = []

    def offer(best: Profile, shape: Shape) -> list[Candidate]:
        seen.append(best)
        return [*(extra or []), *(Candidate(t, f"effect {t}", tagged(t)) for t in tags)]

    offer.seen = seen  # type: ignore[attr-defined]
    return offer


def run(ladder: FakeLadder, candidates: Offer, budget: int = 10,
        on_step: Callable[[Step], None] | None = None) -> RefineResult:
    return refine(start_profile(), shape=SHAPE, measure=ladder, primary=PRIMARY, secondary=SECONDARY,
                  budget=budget, candidates=candidates, vet=vet_without_oracle, on_step=on_step)


def step(result: RefineResult, name: str) -> Step:
    return next(s for s in result.steps if s.candidate == name)


# --- the required cases --------------------------------------------------------------------------


def test_every_ladder_measures_its_own_aa_arm_and_its_floors_are_small() -> None:
    ladder = FakeLadder()
    measured = ladder([Arm(BASELINE), Arm(AA_ARM)])
    floors = aa_floors(measured, *TWINS, METRICS)
    for metric in METRICS:
        for level in LEVELS:
            floor = floors.floor(metric, 4, level)
            assert floor is not None and 0.005 < floor < 0.12, (metric, level, floor)
            assert floors.by_level[metric][level].aa_pairs == 4


def test_a_better_at_one_level_within_noise_elsewhere_is_kept() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}})
    result = run(ladder, fixed_candidates("up8"))
    kept = step(result, "up8")
    assert kept.decision is Decision.KEPT
    assert kept.vs_best is not None and kept.vs_best.keep and kept.vs_best.wins
    verdicts = [c.verdict for c in kept.vs_best.primary]
    assert verdicts == [Verdict.WITHIN_NOISE] * 4 + [Verdict.BETTER]
    assert kept.reason.startswith("kept against the best (keep: better: rps at bg=8")
    assert "; against the baseline it wins: " in kept.reason
    assert result.best == tagged("up8")


def test_b_better_at_8_but_worse_at_0_is_reverted() -> None:
    ladder = FakeLadder(rps={"trade": {8: 1.15, 0: 0.85}})
    result = run(ladder, fixed_candidates("trade"))
    reverted = step(result, "trade")
    assert reverted.decision is Decision.REVERTED
    assert reverted.reason.startswith("reverted against the best (revert: worse: rps at bg=0")
    assert "better: rps at bg=8" in reverted.reason
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
    twice = ["baseline", "baseline"]  # the default scheduler and its A/A repeat
    assert ladder.measured_tags() == [[*twice, "start"], [*twice, "start", "up8"]]
    assert result.measured_candidates == 1


def test_d_a_primary_gain_that_worsens_the_secondary_is_reverted() -> None:
    ladder = FakeLadder(rps={"greedy": {8: 1.15}}, p99={"greedy": {2: 1.3}})
    result = run(ladder, fixed_candidates("greedy"))
    vetoed = step(result, "greedy")
    assert vetoed.decision is Decision.REVERTED
    assert vetoed.vs_best is not None and not vetoed.vs_best.keep
    assert [c.verdict for c in vetoed.vs_best.primary][-1] is Verdict.BETTER
    assert vetoed.vs_best.secondary[2].verdict is Verdict.WORSE
    assert "worse: p99_ms at bg=2" in vetoed.reason
    # nor does it win against the baseline (1.2 x p99 everywhere; greedy 1.3 x at bg=2)
    assert vetoed.vs_baseline is not None and not vetoed.vs_baseline.wins
    assert "secondary p99_ms worse at bg=2" in vetoed.reason
    assert result.best == start_profile()


def test_a_candidate_that_only_fixes_the_secondary_is_kept() -> None:
    ladder = FakeLadder(p99={"tail": {2: 0.7}})
    result = run(ladder, fixed_candidates("tail"))
    kept = step(result, "tail")
    assert kept.vs_best is not None
    assert {c.verdict for c in kept.vs_best.primary} == {Verdict.WITHIN_NOISE}
    assert kept.vs_best.secondary[2].verdict is Verdict.BETTER
    assert kept.decision is Decision.KEPT
    assert kept.reason.startswith("kept against the best (keep: better: p99_ms at bg=2")
    # the keep rule, not the ladder verdict, decided: against the best it would not "win"
    assert not kept.vs_best.wins
    assert result.best == tagged("tail")


def test_e_recorded_numbers_recompute_to_the_recorded_decisions() -> None:
    # effects are relative to the start, so each keeps what the best before it had gained
    ladder = FakeLadder(rps={"up8": {8: 1.15}, "trade": {8: 1.3, 0: 0.8}, "flat": {},
                             "greedy": {4: 1.2}, "tail": {8: 1.15},
                             "better": {1: 1.2, 2: 1.2, 8: 1.15}},
                        p99={"greedy": {0: 1.4}, "tail": {1: 0.7}, "better": {1: 0.7}})
    start = start_profile()
    bad = Candidate("bad", "", start.model_copy(update={"groups": start.groups * 2}))
    result = run(ladder, fixed_candidates("trade", "flat", "up8", "greedy", "tail", "better",
                                          extra=[bad]))
    decisions = {s.candidate: s.decision for s in result.steps}
    assert decisions == {START: Decision.KEPT, "bad": Decision.REJECTED, "trade": Decision.REVERTED,
                         "flat": Decision.REVERTED, "up8": Decision.KEPT,
                         "greedy": Decision.REVERTED, "tail": Decision.KEPT,
                         "better": Decision.KEPT}
    for s in result.steps:
        if s.decision is Decision.REJECTED:
            continue
        assert s.measured is not None and s.vs_baseline is not None
        comparisons = [s.vs_baseline] + ([s.vs_best] if s.vs_best else [])
        for ladder_cmp in comparisons:
            assert ladder_cmp.aa_arm == AA_ARM  # the noise of this very ladder
            for c in (*ladder_cmp.primary, *ladder_cmp.secondary):
                # each verdict from its recorded interval, pairs and noise
                assert classify(c.ci_low, c.ci_high, direction=c.direction, pairs=c.pairs,
                                df=c.noise.df, ratio=c.ratio) is c.verdict
                assert c.noise.aa_pairs == 4
            # both ladder verdicts from the recorded verdicts
            assert ladder_verdict(ladder_cmp.primary, ladder_cmp.secondary) == (
                ladder_cmp.wins, ladder_cmp.reason)
            assert pareto_verdict(ladder_cmp.primary, ladder_cmp.secondary) == (
                ladder_cmp.keep, ladder_cmp.keep_reason)
            # and the whole comparison again from the recorded samples (the A/A arm's among them)
            again = compare_arms(s.measured, ladder_cmp.reference, ladder_cmp.candidate,
                                 primary=PRIMARY, secondary=SECONDARY, twins=TWINS)
            assert again == ladder_cmp
        if s.index > 0:
            assert s.vs_best is not None
            assert (s.decision is Decision.KEPT) == s.vs_best.keep


# --- the loop's mechanics ------------------------------------------------------------------------


def test_step_0_measures_baseline_and_start_and_says_whether_it_wins() -> None:
    ladder = FakeLadder()
    result = run(ladder, fixed_candidates(), budget=0)
    assert [[a.name for a in arms] for arms in ladder.calls] == [[BASELINE, AA_ARM, START]]
    assert ladder.calls[0][1].is_baseline and not ladder.calls[0][2].is_baseline
    (first,) = result.steps
    assert (first.index, first.candidate, first.decision) == (0, START, Decision.KEPT)
    assert first.vs_best is None
    assert result.start_wins  # the start is 1/0.9 x baseline rps everywhere
    assert "against the baseline it wins: rps better at bg=0" in first.reason
    assert first.diff.startswith("--- /dev/null\n+++ start.toml\n")
    assert first.config is not None and first.config.layer_names()[-1] == "rest"
    assert first.config == ladder.calls[0][2].config   # what vet compiled is what was measured


def test_a_start_that_loses_to_the_baseline_says_so_and_is_still_the_best() -> None:
    ladder = FakeLadder(rps={"baseline": dict.fromkeys(LEVELS, 1.0)})
    result = run(ladder, fixed_candidates(), budget=0)
    assert not result.start_wins
    assert "against the baseline it does not win: rps better at no level" in result.steps[0].reason
    assert result.best == start_profile()


def test_later_steps_measure_baseline_best_and_candidate_in_one_call() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}})
    result = run(ladder, fixed_candidates("up8", "flat"))
    assert [[a.name for a in arms] for arms in ladder.calls[1:]] == [[BASELINE, AA_ARM, BEST, CANDIDATE]] * 2
    twice = ["baseline", "baseline"]  # the default scheduler and its A/A repeat
    assert ladder.measured_tags() == [[*twice, "start"], [*twice, "start", "up8"],
                                      [*twice, "up8", "flat"]]  # after a keep, up8 is the best
    assert all(compiled_on(a, SHAPE) for arms in ladder.calls for a in arms[2:])
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


def test_the_ladders_own_aa_noise_is_what_a_keep_must_beat() -> None:
    assert step(run(FakeLadder(rps={"up8": {8: 1.15}}), fixed_candidates("up8")),
                "up8").decision is Decision.KEPT
    noisy = step(run(FakeLadder(rps={"up8": {8: 1.15}}, sd=0.2), fixed_candidates("up8")), "up8")
    assert noisy.decision is Decision.REVERTED
    assert noisy.vs_best is not None and noisy.vs_best.primary[-1].noise.sd > 0.1


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
    result = refine(start, shape=lab, measure=ladder, primary=PRIMARY, budget=3,
                    candidates=lambda best, shape: [freed], vet=vet_without_oracle)
    # the start fails lint on 2x1 (oversubscribed) and is measured anyway, saying so
    assert "lint errors" in result.steps[0].reason and "oversubscribed" in result.steps[0].reason
    assert step(result, "reserve_cores=0").decision is Decision.KEPT
    assert compiled_on(ladder.calls[1][3], dataclasses.replace(lab, reserve_cores=0))
    assert not compiled_on(ladder.calls[1][3], lab)   # the reserve changes the compiled config
    assert compiled_on(ladder.calls[1][2], lab)
    assert result.shape.reserve_cores == 0
    assert result.steps[1].reserve_cores == 0


def test_a_start_that_does_not_validate_is_an_error_not_a_step() -> None:
    start = start_profile()
    broken = start.model_copy(update={"groups": start.groups * 2})
    ladder = FakeLadder()
    with pytest.raises(ThreadwiseError, match=r"start profile cannot be measured \(validate\)"):
        refine(broken, shape=SHAPE, measure=ladder, primary=PRIMARY, budget=1,
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
    result = refine(start_profile(), shape=SHAPE, measure=ladder, primary=PRIMARY,
                    secondary=SECONDARY, budget=3, vet=vet_without_oracle)
    names = [c.name for c in mutate.all_mutations(start_profile(), SHAPE)]
    # the start wins against the baseline and no candidate worsens a metric: nothing failed,
    # so the guided search keeps registry order, and says so
    assert [s.candidate for s in result.steps[1:]] == names[: len(result.steps) - 1]
    assert {s.chosen_because.split(":")[0] for s in result.steps[1:]} == {"registry order"}
    assert result.measured_candidates == 3
    # the fake gives every profile the same means: no step beats the best on the primary, and
    # each decision is the keep rule's (with 10 comparisons per candidate a noise-only "better"
    # somewhere is possible: here hot:treatment=housekeeping's p99 at bg=2, 0.97 [0.943, 0.998])
    for s in result.steps[1:]:
        assert s.vs_best is not None
        assert Verdict.BETTER not in {c.verdict for c in s.vs_best.primary}
        assert (s.decision is Decision.KEPT) == s.vs_best.keep


# --- the guided search ---------------------------------------------------------------------------


def option_candidates() -> Offer:
    """Real changes in registry order: a treatment swap, a housekeeping slice, then the catch-all's
    halved slice (1000 us: the preset is 2000)."""
    start = start_profile()
    batch = start.model_copy(update={"groups": [
        start.groups[0].model_copy(update={"treatment": Treatment.BATCH}), *start.groups[1:]]})
    short = start.model_copy(update={"catch_all": CatchAll(slice_us=1000)})
    house = start.model_copy(update={"groups": [
        *start.groups[:3], start.groups[3].model_copy(update={"slice_us": 2500}), *start.groups[4:]]})
    offer = [Candidate("hot:treatment=batch", "", tagged("batch", batch)),
             Candidate("housekeep:slice_us=2500", "", tagged("house", house)),
             Candidate("rest:slice_us=1000", "", tagged("short", short))]
    return lambda best, shape: [c for c in offer if c.profile.comment != best.comment]


def test_a_latency_regression_is_aimed_at_first_and_every_step_says_why() -> None:
    # the start's p99 is 2.5 x the baseline's everywhere: the catch-all's slice goes first
    ladder = FakeLadder(p99={"baseline": dict.fromkeys(LEVELS, 0.4), "short": dict.fromkeys(LEVELS, 0.4)})
    result = run(ladder, option_candidates(), budget=3)
    assert [s.candidate for s in result.steps] == [START, "rest:slice_us=1000", "hot:treatment=batch",
                                                   "housekeep:slice_us=2500"]
    first = step(result, "rest:slice_us=1000")
    assert first.decision is Decision.KEPT
    assert first.chosen_because.startswith("p99_ms worse at bg=")
    assert "catch-all slice can hold the CPU when worker or feeder wakes" in first.chosen_because
    # kept, and the new best fails nothing: registry order for the rest (a metric within noise but
    # past half its interval may be named, aimed at by no candidate of this offer)
    after_keep = step(result, "hot:treatment=batch").chosen_because
    assert after_keep.startswith(("registry order: no failure",
                                  "untargeted, registry order after the 0 candidates")), after_keep
    assert " worse at " not in after_keep.replace("worse within noise", "")
    # batch's p99 was the start's (2.5 x the best's): a reverted candidate's regression, which the
    # next step no longer aims at; it aims at what the best itself still lacks against the
    # baseline, if anything (its p99 at parity is past half of this near-noiseless ladder's floor
    # at one interval per comparison, not at the judge's simultaneous intervals: either says so)
    after_revert = step(result, "housekeep:slice_us=2500").chosen_because
    assert after_revert.startswith(("untargeted, registry order after the 0 candidates aimed at the failures",
                                    "registry order: no failure")), after_revert
    assert "vs best" not in after_revert
    assert result.steps[0].chosen_because.startswith("the start profile")
    assert all(s.chosen_because for s in result.steps)


def test_blocker_rows_put_the_blockers_layer_first() -> None:
    asked: list[str] = []

    def blockers(arm: str) -> list[Blocker]:
        asked.append(arm)
        return [Blocker(1, "worker", "housekeep", "housekeep", 0, 0.8, 40),
                Blocker(1, "worker", "logger", None, 1, 0.2, 9)]

    ladder = FakeLadder(p99={"baseline": dict.fromkeys(LEVELS, 0.4)})
    result = refine(start_profile(), shape=SHAPE, measure=ladder, primary=PRIMARY, secondary=SECONDARY,
                    budget=2, candidates=option_candidates(), vet=vet_without_oracle,
                    blockers=blockers)
    assert [s.candidate for s in result.steps[1:]] == ["housekeep:slice_us=2500", "rest:slice_us=1000"]
    assert result.steps[1].chosen_because.endswith(
        "housekeep's slice can hold the CPU when worker wakes; top blocker housekeep/housekeep 80% of "
        "worker's wait at bg=1")  # the traced level, whichever level failed
    # after step 0 the start's rows, after a revert the best's (the arm that stays)
    assert asked == [START, BEST, BEST]


def test_a_silent_service_is_aimed_at_before_any_ratio() -> None:
    """Windows the service left without a report line (train's `silences`, from the ladder's cells)
    come first: rolesim's main thread falls to the group `other` (`*`), so `other` made latency is
    the remedy, ahead of the catch-all made preempting and of the catch-all's slice that the p99
    regression points to; once the best has no silent window, the p99 decides again."""
    asked: list[str] = []

    def silences(arm: str) -> list[Silence]:
        asked.append(arm)
        return [Silence(1, 3, 2), Silence(0, 3, 0)] if arm == START else []

    start = start_profile()
    other = len(start.groups) - 1
    assert start.groups[other].match == ["*"]
    raised = start.groups[other].model_copy(update={"treatment": Treatment.LATENCY})
    extra = [Candidate("rest:preempt=true", "", tagged("preempting", start.model_copy(
                 update={"catch_all": CatchAll(preempt=True)}))),
             Candidate("other:treatment=latency", "", tagged("raised", start.model_copy(
                 update={"groups": [*start.groups[:other], raised]})))]
    offer = option_candidates()
    ladder = FakeLadder(p99={"baseline": dict.fromkeys(LEVELS, 0.4), "short": dict.fromkeys(LEVELS, 0.4)})
    result = refine(start, shape=SHAPE, measure=ladder, primary=PRIMARY, secondary=SECONDARY, budget=2,
                    candidates=lambda best, shape: [*offer(best, shape), *extra],
                    vet=vet_without_oracle, silences=silences)
    assert [s.candidate for s in result.steps[1:]] == ["other:treatment=latency", "rest:slice_us=1000"]
    assert result.steps[1].chosen_because == (
        "rps unmeasured at bg=1 (2 of 3 windows of start without a report line from the service): other "
        "holds the main thread, the likely reporter: a preempting layer is dispatched before every "
        "non-preempting one")
    assert result.steps[2].chosen_because.startswith("p99_ms worse at bg=")
    assert asked == [START, BEST, CANDIDATE]  # after a revert the best's windows, after a keep the new best's


def test_a_rejected_step_records_why_it_was_chosen_too() -> None:
    start = start_profile()
    bad = Candidate("rest:slice_us=1000", "", start.model_copy(update={
        "catch_all": CatchAll(slice_us=1000), "groups": start.groups * 2}))
    ladder = FakeLadder(p99={"baseline": dict.fromkeys(LEVELS, 0.4)})
    result = run(ladder, lambda best, shape: [bad], budget=1)
    rejected = step(result, "rest:slice_us=1000")
    assert rejected.decision is Decision.REJECTED
    assert rejected.chosen_because.startswith("p99_ms worse at bg=")


def test_chosen_because_is_stored_and_shown_in_the_reports_steps(tmp_path: Path) -> None:
    from threadwise.refine import report
    from threadwise.refine.measure import store
    from threadwise.refine.train import store_steps

    ladder = FakeLadder(p99={"baseline": dict.fromkeys(LEVELS, 0.4), "short": dict.fromkeys(LEVELS, 0.4)})
    result = run(ladder, option_candidates(), budget=1)
    con = store.open_ladder(tmp_path / "ladder.duckdb")
    try:
        store_steps(con, result, [1, 2], repeats=4, primary=PRIMARY[0])
        stored = [r[0] for r in con.execute("SELECT chosen_because FROM step ORDER BY step").fetchall()]
        table = report.steps_table(con)
    finally:
        con.close()
    assert stored == [s.chosen_because for s in result.steps]
    assert table[0] == "| step | candidate | chosen because | ladder run | decision | reason |"
    assert table[3].startswith(f"| 1 | `rest:slice_us=1000` | {result.steps[1].chosen_because} | 2 | "
                               "**kept** |")


def test_a_record_older_than_the_guided_search_shows_a_dash() -> None:
    from threadwise.refine import report
    from threadwise.refine.measure import store

    con = store.open_ladder(Path(__file__).parent / "fixtures" / "rolesim-2026-11-22.duckdb",
                            read_only=True)
    try:
        table = report.steps_table(con)
    finally:
        con.close()
    assert table[3].startswith("| 1 | `hot:treatment=latency` | - | 3 | **reverted** |")


def test_a_ladder_that_fails_under_a_candidate_ends_the_search_and_keeps_every_step_before_it() -> None:
    """A lab failure (a guest crash) under the second candidate: the first candidate's measured step
    and the best stay, the failed one is a step that says why, and nothing after it is measured."""
    ladder = FakeLadder(rps={"a": dict.fromkeys(LEVELS, 1.0)})

    def measure(arms: list[Arm]) -> Measured:
        if len(ladder.calls) == 2:
            ladder.calls.append(list(arms))
            raise LabError("the initramfs guest ended (qemu exited 0) before sending the results "
                           "archive; ...\n  [   80.6] Kernel panic - not syncing")
        return ladder(arms)

    result = refine(start_profile(), shape=SHAPE, measure=measure, primary=PRIMARY, secondary=SECONDARY,
                    budget=5, candidates=fixed_candidates("a", "b", "c"),
                    vet=vet_without_oracle)
    assert [(s.candidate, s.decision) for s in result.steps] == [
        (START, Decision.KEPT), ("a", Decision.REVERTED), ("b", Decision.FAILED)]
    failed = step(result, "b")
    assert failed.reason == ("not measured: its ladder did not finish (the initramfs guest ended (qemu "
                             "exited 0) before sending the results archive; ...); the search stopped here")
    assert failed.vs_best is None and failed.measured is None
    assert result.measured_candidates == 1 and len(ladder.calls) == 3


# --- once per step: each arm compiled once, each comparison computed once ------------------------


def test_each_arm_is_compiled_once_and_each_comparison_computed_once_per_step(monkeypatch):
    """A step's arms are built from what vet compiled (the best's from when it was vetted), and the
    loop decides from the comparisons the measurement hands back (the judge's stored rows), so it
    computes none itself; compare_arms runs only where a measurement brought none."""
    from threadwise.refine.measure import judge as judge_module
    from threadwise.refine.search import loop as loop_module

    compiled: list[str] = []
    real_compile = synthesize_vet.compile_profile

    def counting_compile(profile: Profile, shape: Shape):
        compiled.append(profile.comment or "start")
        return real_compile(profile, shape)

    monkeypatch.setattr(synthesize_vet, "_COMPILED", {})
    monkeypatch.setattr(synthesize_vet, "compile_profile", counting_compile)
    ladder = FakeLadder(rps={"better": dict.fromkeys(LEVELS, 1.3)}, repeats=5)
    computed: list[tuple[str, str]] = []
    stored: list[list[tuple[str, str]]] = []   # per measurement (step)

    def measure(arms: list[Arm]) -> judge_module.Judged:
        """A measurement that judges every pair a step needs once, as run_ladder does."""
        measured = ladder(arms)
        names = [a.name for a in arms]
        pairs = [(BASELINE, n) for n in names if n != BASELINE]
        if BEST in names:
            pairs.append((BEST, CANDIDATE))
        stored.append(pairs)
        return judge_module.Judged(measured, {p: compare_arms(measured, *p, primary=PRIMARY,
                                                              secondary=SECONDARY, twins=TWINS)
                                              for p in pairs})

    real_compare = loop_module.compare_arms

    def counting_compare(measured: Measured, reference: str, candidate: str, **kw):
        computed.append((reference, candidate))
        return real_compare(measured, reference, candidate, **kw)

    monkeypatch.setattr(loop_module, "compare_arms", counting_compare)
    result = refine(start_profile(), shape=SHAPE, measure=measure, primary=PRIMARY, secondary=SECONDARY,
                    budget=2, candidates=fixed_candidates("better", "worse"), vet=vet_without_oracle)
    assert [s.decision for s in result.steps] == [Decision.KEPT, Decision.KEPT, Decision.REVERTED]
    # every profile compiled once: the start, then each candidate (the kept one is the next best)
    assert sorted(compiled) == ["fx:better", "fx:worse", "start"], compiled
    # the loop computed no comparison: it read the three of each step from what was stored
    assert computed == [], computed
    # each once a step: step 0 its 2 arms against the baseline, then 3 arms and the deciding pair
    assert [len(set(pairs)) for pairs in stored] == [len(pairs) for pairs in stored] == [2, 4, 4]
    # and with a bare measurement (no stored rows) it computes each one once
    computed.clear()
    refine(start_profile(), shape=SHAPE, measure=ladder, primary=PRIMARY, secondary=SECONDARY,
           budget=1, candidates=fixed_candidates("worse"), vet=vet_without_oracle)
    assert computed == [(BASELINE, START), (BEST, CANDIDATE), (BASELINE, CANDIDATE), (BASELINE, BEST)]
