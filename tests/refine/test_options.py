"""refine.options: the latency options (preempt, preempt_first, protected, slices, the catch-all's)
are offered where scx_layered 1.1.4 acts on them, and each reaches the compiled layer; the
[scheduler] table's --interval is offered at the other steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from threadwise.refine.search.candidate import Candidate
from threadwise.refine.search.mutate import all_mutations
from threadwise.refine.search.options import (
    INTERVAL_CHOICES_MS,
    catch_all_options,
    exclusive_slices,
    preempt_firsts,
    preempts,
    protections,
    scheduler_intervals,
)
from threadwise.shape import synthetic
from threadwise.synthesize.presets import SCHEDULER_INTERVAL_MS, scheduler_args
from threadwise.synthesize.reader import load_profile, parse_profile
from threadwise.synthesize.schema import CatchAll, Group, Profile, Scheduler
from threadwise.synthesize.vet import compiled_config, toml_text, validation_errors

GOLDEN = Path(__file__).parents[1] / "synthesize" / "fixtures" / "golden"
SMT4 = synthetic(4, 2)  # rolesim's hot group fits: a Confined layer
LAB2 = synthetic(2, 1)  # it does not: demoted to Grouped, not preempting


def rolesim() -> Profile:
    return load_profile(GOLDEN / "rolesim.toml")[0]


def layer(candidate: Candidate | Profile, name: str, shape: Any = SMT4) -> tuple[str, dict[str, Any]]:
    profile = candidate.profile if isinstance(candidate, Candidate) else candidate
    spec = next(s for s in compiled_config(profile, shape)[0].to_json_data() if s["name"] == name)
    return next(iter(spec["kind"].items()))


def with_group(profile: Profile, name: str, **update: Any) -> Profile:
    return profile.model_copy(update={"groups": [
        g.model_copy(update=update) if g.name == name else g for g in profile.groups]})


def group(profile: Profile, name: str) -> Group:
    return next(g for g in profile.groups if g.name == name)


def test_preempt_flips_each_groups_compiled_preempt() -> None:
    # the exclusive preset does not preempt: on; with `preempt = true` written over it: off
    eager = with_group(rolesim(), "hot", preempt=True)
    for profile, hot in ((rolesim(), "hot:preempt=true"), (eager, "hot:preempt=false")):
        found = {c.name: c for c in preempts(profile, SMT4)}
        assert list(found) == [hot, "worker:preempt=false", "feeder:preempt=false",
                               "housekeep:preempt=true", "other:preempt=true"]
        for name, candidate in found.items():
            target, value = name.split(":")[0], name.endswith("true")
            assert layer(candidate, target)[1].get("preempt", False) is value
            assert [g for g in candidate.profile.groups if g.name != target] == [
                g for g in profile.groups if g.name != target]
            assert validation_errors(candidate.profile) == []


def test_a_demoted_exclusive_group_is_never_made_to_preempt() -> None:
    assert layer(rolesim(), "hot", LAB2)[0] == "Grouped"
    names = [c.name for c in preempts(rolesim(), LAB2)]
    assert not [n for n in names if n.startswith("hot:")]


def test_preempt_off_drops_preempt_first_and_on_drops_disallow_preempt_after() -> None:
    eager = with_group(rolesim(), "worker", preempt_first=True)
    (off,) = [c for c in preempts(eager, SMT4) if c.name == "worker:preempt=false"]
    assert group(off.profile, "worker").preempt_first is None
    assert "preempt_first dropped" in off.description
    assert validation_errors(off.profile) == []
    calm = with_group(rolesim(), "hot", preempt=False, protected=False, disallow_preempt_after_us=20000)
    assert validation_errors(calm) == []
    (on,) = [c for c in preempts(calm, SMT4) if c.name == "hot:preempt=true"]
    assert group(on.profile, "hot").disallow_preempt_after_us is None
    assert validation_errors(on.profile) == []


def test_preempt_first_only_where_an_open_layer_preempts() -> None:
    found = {c.name: c for c in preempt_firsts(rolesim(), SMT4)}
    assert list(found) == ["worker:preempt_first=true", "feeder:preempt_first=true"]
    assert layer(found["worker:preempt_first=true"], "worker")[1]["preempt_first"] is True
    # it needs preempt: a latency group that no longer preempts gets none
    quiet = with_group(rolesim(), "worker", preempt=False)
    assert [c.name for c in preempt_firsts(quiet, SMT4)] == ["feeder:preempt_first=true"]


def test_protected_off_only_for_a_protected_confined_layer() -> None:
    (off,) = protections(rolesim(), SMT4)
    assert off.name == "hot:protected=false"
    kind, options = layer(off, "hot")
    assert (kind, options["protected"]) == ("Confined", False)
    assert protections(rolesim(), LAB2) == []  # Grouped: the preset sets no protected
    assert protections(with_group(rolesim(), "hot", protected=False), SMT4) == []


def long_slices() -> Profile:
    """rolesim with 20 ms slices written over the exclusive and catch-all presets (2 ms since the
    lab re-derivation): the slices the short-slice operators exist to cut."""
    return with_group(rolesim(), "hot", slice_us=20000).model_copy(
        update={"catch_all": CatchAll(slice_us=20000)})


def test_exclusive_slices_are_short_and_not_what_halving_offers() -> None:
    found = {c.name: c for c in exclusive_slices(long_slices(), SMT4)}
    assert list(found) == ["hot:slice_us=1000", "hot:slice_us=2000"]
    assert layer(found["hot:slice_us=1000"], "hot")[1]["slice_us"] == 1000
    assert [c.name for c in exclusive_slices(with_group(rolesim(), "hot", slice_us=4000), SMT4)] == [
        "hot:slice_us=1000"]  # 2000 is slices()'s halving
    # the preset's 2000: 1000 is slices()'s halving, 2000 the current value
    assert exclusive_slices(rolesim(), SMT4) == []
    # demoted to Grouped, the preset's 20 ms (presets.DEMOTED_OPTIONS) applies
    assert [c.name for c in exclusive_slices(rolesim(), LAB2)] == ["hot:slice_us=1000",
                                                                    "hot:slice_us=2000"]


def test_the_catch_alls_slice_and_preempt_but_never_its_weight() -> None:
    found = {c.name: c for c in catch_all_options(long_slices(), SMT4)}
    assert list(found) == ["rest:slice_us=10000", "rest:slice_us=2000", "rest:preempt=true"]
    assert layer(found["rest:slice_us=2000"], "rest")[1]["slice_us"] == 2000
    assert layer(found["rest:preempt=true"], "rest")[1]["preempt"] is True
    assert found["rest:slice_us=2000"].profile.groups == long_slices().groups
    short = rolesim().model_copy(update={"catch_all": CatchAll(slice_us=4000, preempt=True)})
    assert [c.name for c in catch_all_options(short, SMT4)] == ["rest:slice_us=2000", "rest:preempt=false"]
    # the preset's 2000: halved only (2000 is the current value)
    assert [c.name for c in catch_all_options(rolesim(), SMT4)] == ["rest:slice_us=1000", "rest:preempt=true"]
    names = [c.name for c in all_mutations(rolesim(), SMT4)]
    assert not [n for n in names if n.startswith("rest:weight")]
    assert {"rest:slice_us=1000", "hot:protected=false", "hot:preempt=true"} <= set(names)
    assert len(names) == len(set(names))


def test_scheduler_intervals_offer_the_other_steps_in_the_scheduler_table() -> None:
    found = {c.name: c for c in scheduler_intervals(rolesim(), SMT4)}
    assert list(found) == ["scheduler:interval_ms=1000", "scheduler:interval_ms=10000"]
    assert SCHEDULER_INTERVAL_MS not in INTERVAL_CHOICES_MS   # both differ from the preset
    for name, candidate in found.items():
        value = int(name.split("=")[1])
        assert candidate.profile.scheduler == Scheduler(interval_ms=value)
        assert candidate.profile.groups == rolesim().groups
        assert candidate.profile.catch_all == rolesim().catch_all
        assert scheduler_args(candidate.profile) == ("--interval", f"{value / 1000:g}")
        assert f"{SCHEDULER_INTERVAL_MS} -> {value} ms" in candidate.description
        assert validation_errors(candidate.profile) == []
        # written and read back with its table
        assert parse_profile(toml_text(candidate.profile))[0] == candidate.profile
    # the current value is not offered again
    slow = rolesim().model_copy(update={"scheduler": Scheduler(interval_ms=10_000)})
    assert [c.name for c in scheduler_intervals(slow, SMT4)] == ["scheduler:interval_ms=1000"]
    assert scheduler_intervals(slow, SMT4)[0].description.startswith(
        "scx_layered's userspace step every 10000 -> 1000 ms")
