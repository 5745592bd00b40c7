"""The loop's steps alone (search/loop.py): the start's vetting, step 0, and one search step, each
called directly over test_loop's deterministic ladder (synthetic cells, real stats and real vetting)."""

from __future__ import annotations

import pytest

from tests.refine.test_loop import (
    LEVELS,
    PRIMARY,
    SECONDARY,
    SHAPE,
    FakeLadder,
    start_profile,
    tagged,
    vet_without_oracle,
)
from threadwise.errors import LabError, ThreadwiseError
from threadwise.refine.measure.stats import Measured
from threadwise.refine.search.guide import Choice
from threadwise.refine.search.loop import (
    BASELINE,
    BEST,
    CANDIDATE,
    START,
    Arm,
    Best,
    Decision,
    Search,
    measure_start,
    try_candidate,
    vet_start,
)
from threadwise.refine.search.mutate import Candidate
from threadwise.refine.search.vetting import Vetted


def search(ladder: FakeLadder) -> Search:
    return Search(ladder, PRIMARY, SECONDARY, blockers=None, silences=None, on_step=None)


def started(ladder: FakeLadder) -> tuple[Search, Best]:
    steps = search(ladder)
    return steps, measure_start(steps, start_profile(), SHAPE, vet=vet_without_oracle, references=(),
                                because="the start")


def test_a_clean_start_is_vetted_with_no_note_and_a_broken_one_is_refused() -> None:
    vetted = vet_start(start_profile(), SHAPE, vet_without_oracle)
    assert isinstance(vetted.checked, Vetted) and vetted.compiled is vetted.checked and vetted.note == ""
    start = start_profile()
    twin = start.model_copy(update={"groups": [*start.groups[:-1], start.groups[1], start.groups[-1]]})
    with pytest.raises(ThreadwiseError, match=r"the start profile cannot be measured \(validate\)"):
        vet_start(twin, SHAPE, vet_without_oracle)


def test_step_zero_measures_the_start_beside_the_baseline_and_makes_it_the_best() -> None:
    ladder = FakeLadder()
    steps, best = started(ladder)
    assert ladder.measured_tags() == [["baseline", "baseline", "start"]]   # baseline, its A/A twin, start
    assert [arm.name for arm in ladder.calls[0]] == [BASELINE, "baseline-aa", START]
    assert best.profile == start_profile() and best.shape == SHAPE and best.arm.name == START
    [zero] = steps.steps
    assert (zero.index, zero.candidate, zero.decision, zero.chosen_because) == (0, START, Decision.KEPT,
                                                                                 "the start")
    # the fake start beats the baseline (0.9x rps and 1.2x p99 there): nothing left to fix
    assert best.diagnosis.failures == [] and best.diagnosis.blocking == []


def test_a_kept_candidate_becomes_the_best_and_a_reverted_one_leaves_it() -> None:
    ladder = FakeLadder(rps={"up8": {8: 1.15}, "trade": {8: 1.15, 0: 0.85}})
    steps, best = started(ladder)
    reverted = try_candidate(steps, best, Choice(Candidate("trade", "", tagged("trade")), "first"),
                             vet=vet_without_oracle, index=1)
    assert reverted.step.decision is Decision.REVERTED and reverted.best.profile == best.profile
    assert reverted.best.arm == best.arm                     # the best is not compiled again
    assert [arm.name for arm in ladder.calls[-1]] == [BASELINE, "baseline-aa", BEST, CANDIDATE]
    kept = try_candidate(steps, reverted.best, Choice(Candidate("up8", "", tagged("up8")), "then"),
                         vet=vet_without_oracle, index=2)
    assert kept.step.decision is Decision.KEPT and kept.best.profile == tagged("up8")
    assert kept.best.arm.name == CANDIDATE
    assert [s.candidate for s in steps.steps] == [START, "trade", "up8"]
    assert [s.chosen_because for s in steps.steps[1:]] == ["first", "then"]


def test_a_rejected_candidate_is_recorded_without_a_ladder_and_a_failed_ladder_says_why() -> None:
    ladder = FakeLadder(rps={"a": dict.fromkeys(LEVELS, 1.0)})
    steps, best = started(ladder)
    start = start_profile()
    twin = Candidate("twin", "", start.model_copy(update={"groups": start.groups * 2}))
    rejected = try_candidate(steps, best, Choice(twin, "why"), vet=vet_without_oracle, index=1)
    assert rejected.step.decision is Decision.REJECTED and rejected.best == best
    assert rejected.step.reason.startswith("rejected before measuring (validate): ")
    assert len(ladder.calls) == 1                            # no ladder for it

    def crashes(arms: list[Arm]) -> Measured:
        raise LabError("the guest ended before sending the results archive\n  [ 80.6] Kernel panic")

    steps.measure = crashes
    failed = try_candidate(steps, best, Choice(Candidate("a", "", tagged("a")), "why"),
                           vet=vet_without_oracle, index=2)
    assert failed.step.decision is Decision.FAILED and failed.best == best
    assert failed.step.reason == ("not measured: its ladder did not finish (the guest ended before "
                                  "sending the results archive); the search stopped here")
    assert not failed.step.measured_run
