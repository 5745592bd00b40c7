"""search/screen.py: which candidates a screen measures, how it ranks them, and the null arm.

The ladder is synthetic (a Measured built here): these tests pin the ranking rule on known
effects. The real screen runs in the lab (tests/lab/test_train_lab.py).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest

from threadwise.refine.measure.judge import Judged
from threadwise.refine.measure.plan import AA_ARM, BASELINE, Arm
from threadwise.refine.measure.stats import Measured, Obs
from threadwise.refine.search import screen, vetting
from threadwise.refine.search.candidate import Candidate
from threadwise.refine.search.loop import START
from threadwise.refine.search.screen_guide import ScreenLosses
from threadwise.shape import synthetic
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.schema import Profile

GOLDEN = Path(__file__).parents[1] / "synthesize" / "fixtures" / "golden"
SHAPE = synthetic(2, 1)
METRICS = [("rps", "higher"), ("p99_us", "lower")]
LEVELS = (0, 4)
vet_without_oracle = partial(vetting.vet, check=lambda config, args: [])


def rolesim() -> Profile:
    return load_profile(GOLDEN / "rolesim.toml")[0]


def ladder(arms: dict[str, dict[int, tuple[float, float]]], repeats: int = 2,
           aa_jitter: float = 0.02) -> Measured:
    """arm -> level -> (rps, p99) means; the default scheduler's twin differs by `aa_jitter`."""
    base = {0: (100.0, 1000.0), 4: (50.0, 4000.0)}
    every = {BASELINE: base, AA_ARM: {lv: (r * (1 + aa_jitter), p * (1 - aa_jitter))
                                      for lv, (r, p) in base.items()}, **arms}
    measured: Measured = {}
    for arm, levels in every.items():
        for level, (rps, p99) in levels.items():
            cells = measured.setdefault(arm, {}).setdefault(level, {})
            cells["rps"] = {r: Obs(rps * (1 + 0.01 * r)) for r in range(1, repeats + 1)}
            cells["p99_us"] = {r: Obs(p99 * (1 + 0.01 * r)) for r in range(1, repeats + 1)}
    return measured


def test_a_candidate_within_noise_idle_and_better_loaded_outranks_one_that_loses_idle() -> None:
    # onnxrt's measured case (issue 50): exclusive 0.43x idle and 1.5x loaded; default 0.99x / 1.58x
    measured = ladder({"exclusive": {0: (43.0, 1480.0), 4: (75.0, 2500.0)},
                       "default": {0: (99.0, 1000.0), 4: (79.0, 4000.0)}})
    exclusive = screen.score(measured, "exclusive", METRICS, LEVELS)
    default = screen.score(measured, "default", METRICS, LEVELS)
    assert exclusive.loss > 5 and default.loss == 0
    assert default.gain("rps") > 5
    assert default.rank_key("rps") < exclusive.rank_key("rps")
    assert default.ratios[("rps", 4)] == pytest.approx(79 / 50 / math.sqrt(1.02), rel=1e-6)


def test_among_arms_without_loss_a_clear_gain_comes_first_and_the_safest_of_those_first() -> None:
    # "bold" gains most under load but sits nearest a loss idle; "safe" gains less, loses nothing;
    # "flat" is safest of all but gains nothing clear (the rule asks for a gain somewhere)
    better_p99 = {0: 950.0, 4: 3800.0}
    measured = ladder({"bold": {0: (97.0, better_p99[0]), 4: (85.0, better_p99[4])},
                       "safe": {0: (102.0, better_p99[0]), 4: (75.0, better_p99[4])},
                       "flat": {0: (104.0, better_p99[0]), 4: (52.0, better_p99[4])}})
    scores = {arm: screen.score(measured, arm, METRICS, LEVELS) for arm in ("bold", "safe", "flat")}
    assert all(s.loss == 0 for s in scores.values())
    assert scores["bold"].gain("rps") > scores["safe"].gain("rps") >= screen.CLEAR_GAIN_UNITS
    assert scores["flat"].gain("rps") < screen.CLEAR_GAIN_UNITS
    assert scores["flat"].worst > scores["safe"].worst > scores["bold"].worst

    def ranked(rule: str) -> list[str]:
        return sorted(scores, key=lambda arm: scores[arm].rank_key("rps", rule))

    assert ranked(screen.RANK_RULE) == ["safe", "bold", "flat"]
    assert ranked("loss-then-gain") == ["bold", "safe", "flat"]
    with pytest.raises(ValueError, match="unknown screen rank rule"):
        scores["bold"].rank_key("rps", "gain-only")


def test_the_unit_is_never_narrower_than_the_judges_resolution() -> None:
    # identical default arms: a 3% difference is less than one unit, so it is no loss
    measured = ladder({"small": {0: (97.0, 1000.0), 4: (50.0, 4000.0)}}, aa_jitter=0.0)
    small = screen.score(measured, "small", METRICS, LEVELS)
    assert small.loss == 0 and -1 < small.worst < 0


def test_an_arm_without_a_valid_cell_at_a_level_ranks_after_every_complete_one() -> None:
    measured = ladder({"losing": {0: (40.0, 3000.0), 4: (40.0, 5000.0)}, "silent": {0: (200.0, 10.0)}})
    losing = screen.score(measured, "losing", METRICS, LEVELS)
    silent = screen.score(measured, "silent", METRICS, LEVELS)
    assert not silent.complete and losing.complete
    assert losing.rank_key("rps") < silent.rank_key("rps")


def test_screen_candidates_take_each_class_of_change_in_turn_busiest_group_first() -> None:
    profile = rolesim()
    chosen = screen.screen_candidates(profile, SHAPE, 6)
    assert len(chosen) == 6
    names = [c.name for c in chosen]
    # treatment, structure, option, treatment, structure, option
    assert ":treatment=" in names[0] and ":treatment=" in names[3]
    busiest = max(profile.groups, key=lambda g: g.evidence.cpu_share if g.evidence else 0).name
    assert names[0].startswith(f"{busiest}:")
    assert not any(":treatment=" in n for n in (names[1], names[2], names[4], names[5]))
    assert len(set(names)) == 6
    assert screen.screen_candidates(profile, SHAPE, 0) == []


def test_within_a_class_each_operator_takes_its_turn() -> None:
    """A screen's option slots go to different operators (the catch-all's among them), not to
    every option of the busiest group first."""
    from threadwise.refine.search.mutate import mutations_by_operator

    profile = rolesim()
    operator_of = {c.name: op for op, found in mutations_by_operator(profile, SHAPE).items() for c in found}
    options = [op for op in screen.CLASSES[2] if any(o == op for o in operator_of.values())]
    assert "catch_all" in options, options
    chosen = [c.name for c in screen.screen_candidates(profile, SHAPE, 3 * len(options))]
    taken = [operator_of[name] for name in chosen if operator_of[name] in screen.CLASSES[2]]
    assert taken[:len(options)] == options, (taken, options)   # each once before any twice


def test_the_null_arm_is_the_catch_all_alone_with_the_profiles_flags() -> None:
    seen = []
    arm = screen.null_arm(rolesim(), check=lambda config, args: seen.append((config, args)) or [])
    assert arm.name == screen.NULL_ARM and arm.profile_toml is None
    assert [spec.name for spec in arm.config] == ["rest"]
    assert seen and seen[0][1] == arm.scx_args and "--interval" in arm.scx_args
    with pytest.raises(ValueError, match="print-and-exit"):
        screen.null_arm(rolesim(), check=lambda config, args: ["unknown field"])


def test_run_screen_ranks_every_vetted_candidate_and_the_top_is_what_step_0_confirms() -> None:
    profile, shape = rolesim(), synthetic(4, 2)   # the golden is sized for 4 cores x 2
    start = vet_without_oracle(Candidate(START, "the start profile", profile), shape)
    assert isinstance(start, vetting.Vetted)
    candidates = screen.screen_candidates(profile, shape, 3)
    asked: list[list[str]] = []

    def measure(arms: list[Arm]) -> Judged:
        asked.append([a.name for a in arms])
        # c02 wins (better loaded, within noise idle); the start loses idle; the rest lose more
        effects = {"start": {0: (60.0, 1300.0), 4: (90.0, 1000.0)},
                   "c02": {0: (100.0, 1000.0), 4: (80.0, 1000.0)}}
        worse = {0: (30.0, 9000.0), 4: (30.0, 9000.0)}
        arms_fx = {a.name: effects.get(a.name, worse) for a in arms if a.name not in (BASELINE, AA_ARM)}
        return Judged(ladder(arms_fx), {})

    null = screen.null_arm(profile, check=lambda config, args: [])
    result = screen.run_screen(start, candidates, shape=shape, measure=measure, metrics=METRICS,
                               levels=LEVELS, vet=vet_without_oracle, null=null)
    # the default scheduler first and half-way: every arm's reference spans the run
    assert asked == [[BASELINE, screen.NULL_ARM, "start", "c01", AA_ARM, "c02", "c03"]]
    assert result.top.arm == "c02" and result.top.candidate is candidates[1]
    assert sorted(e.rank for e in result.entries if e.rank) == [1, 2, 3, 4]
    assert result.null is not None and result.null.arm == screen.NULL_ARM
    assert candidates[1].name in result.because() and "confirmed" in result.because()
    assert f"ranked {screen.RANK_RULE}" in result.because() and "worst " in result.because()
    # what the guided order is told (search/screen_guide.py): the start's loss apart, every
    # measured candidate's by name; the losers here lie far beyond the start's
    losses = ScreenLosses.of_result(result)
    by_arm = {e.arm: e for e in result.entries}
    assert losses.start == by_arm["start"].score.loss   # type: ignore[union-attr]
    assert losses.by_candidate == {e.candidate.name: e.score.loss for e in result.entries
                                   if e.score is not None and e.arm != "start"}
    assert losses.demotes(by_arm["c01"].candidate.name) is not None
    assert losses.demotes(by_arm["c02"].candidate.name) is None
