"""refine.mutate: every operator yields a profile that validates and compiles (or is skipped
with a reason), each does what its name says, and vet gates on validate, compile, oracle, lint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from threadwise.errors import MissingTool, ThreadwiseError
from threadwise.refine.search.mutate import (
    OPERATORS,
    Candidate,
    all_mutations,
    cpu_fractions,
    hot_threads,
    joins,
    merges,
    reserves,
    slices,
    splits,
    treatments,
    weights,
)
from threadwise.refine.search.vetting import Rejected, Vetted, vet
from threadwise.shape import Shape, synthetic
from threadwise.synthesize import oracle
from threadwise.synthesize.layered import LayerConfig, LayerSpec
from threadwise.synthesize.presets import SCHEDULER_INTERVAL_MS, scheduler_args
from threadwise.synthesize.reader import load_profile, parse_profile
from threadwise.synthesize.schema import CatchAll, Evidence, Group, Profile, Scheduler, Treatment, Workload
from threadwise.synthesize.vet import compiled_config, toml_text, validation_errors

GOLDEN = sorted((Path(__file__).parents[1] / "synthesize" / "fixtures" / "golden").glob("*.toml"))
SMT4 = synthetic(4, 2)
LAB2 = synthetic(2, 1)

# --- generated profiles -------------------------------------------------------------------------

PATTERNS = ["hot-*", "worker-*", "feeder", "io_thd_*", "bio_*", "jemalloc_bg", "compactor",
            "log*", "net-rx", "net-tx", "gc-*", "timer"]
THREADS = ["hot-0", "hot-1", "hot-2", "worker-0", "worker-1", "feeder", "io_thd_1", "bio_close",
           "jemalloc_bg", "compactor", "logger", "net-rx", "net-tx", "gc-0", "timer"]


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    patterns = draw(st.permutations(PATTERNS))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))
    # "plain" profiles keep default settings and two treatments, so that groups can merge
    plain = draw(st.booleans())
    kinds = [Treatment.EXCLUSIVE, Treatment.LATENCY] if plain else list(Treatment)
    groups, start = [], 0
    for k, size in enumerate(sizes):
        match = patterns[start:start + size]
        start += size
        if not match:
            break
        treatment = draw(st.sampled_from(kinds))
        request = None if plain else draw(st.none() | st.integers(1, 4000))
        hot = draw(st.integers(0, 4))
        if treatment is Treatment.EXCLUSIVE and not hot and request is None:
            hot = 1
        names = draw(st.lists(st.sampled_from(THREADS), max_size=5, unique=True))
        evidence = draw(st.none() | st.builds(
            Evidence, names=st.just(names), threads=st.just(len(names)),
            cpu_share=st.floats(0, 4), max_thread_share=st.floats(0, 1),
            wakeups_per_s=st.floats(0, 1e4),
            slice_p50_us=st.none() | st.floats(1, 1e4)))
        settings = {} if plain else dict(
            cpu_fraction=draw(st.sampled_from([0.25, 0.5, 1.0]) | st.floats(0.01, 1.0)),
            slice_us=draw(st.none() | st.integers(1, 100_000)),
            weight=draw(st.none() | st.sampled_from([1, 2, 10, 100, 5000, 9999, 10000])),
            exclude=draw(st.sampled_from([[], [], ["x-"]])),
            avg_runtime_us=draw(st.sampled_from([None, None, [0, 5000]])),
            preempt=draw(st.none() | st.booleans()),
            protected=draw(st.none() | st.just(False)) if treatment is Treatment.EXCLUSIVE else None)
        groups.append(Group(name=f"g{k}", match=list(match), treatment=treatment,
                            hot_threads=hot, request_millicores=request, evidence=evidence,
                            **settings))
    catch_all = draw(st.none() | st.builds(CatchAll, slice_us=st.none() | st.integers(1, 100_000),
                                           preempt=st.none() | st.booleans()))
    return Profile(schema_version=1, name="gen", workload=Workload(process="proc"), group=groups,
                   catch_all=catch_all)


SHAPES = st.builds(synthetic, st.integers(1, 8), st.integers(1, 2), st.integers(0, 2))
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_sound(candidate: Candidate, parent: Profile, shape: Shape) -> None:
    """Validates, compiles for its shape, round-trips through TOML, and changes something."""
    assert validation_errors(candidate.profile) == [], candidate.name
    config, _ = compiled_config(candidate.profile, candidate.shape_for(shape))
    assert LayerConfig.from_json_data(json.loads(config.to_json())) == config
    assert parse_profile(toml_text(candidate.profile))[0] == candidate.profile
    assert candidate.profile != parent or candidate.shape_for(shape) != shape, candidate.name
    assert candidate.name and candidate.description


@given(profile=profiles(), shape=SHAPES)
@FAST
def test_every_operator_yields_valid_compilable_profiles_or_is_skipped(profile: Profile,
                                                                       shape: Shape) -> None:
    assume(not validation_errors(profile))
    for spec in OPERATORS:
        if spec.apply is None:
            assert spec.skipped and len(spec.skipped) > 40
            continue
        for candidate in spec.apply(profile, shape):
            assert_sound(candidate, profile, shape)


@given(profile=profiles(), shape=SHAPES)
@FAST
def test_all_mutations_is_deterministic_unique_and_never_a_noop(profile: Profile,
                                                                shape: Shape) -> None:
    assume(not validation_errors(profile))
    found = all_mutations(profile, shape)
    assert [c.name for c in found] == [c.name for c in all_mutations(profile, shape)]
    assert len({c.name for c in found}) == len(found)
    parent = compiled(profile, shape)
    for candidate in found:
        assert compiled(candidate.profile, candidate.shape_for(shape)) != parent, candidate.name


def compiled(profile: Profile, shape: Shape) -> tuple[list[LayerSpec], tuple[str, ...]]:
    """What scx_layered is started with: the layers (comments aside) and its flags."""
    layers = [dataclasses.replace(s, comment=None) for s in compiled_config(profile, shape)[0]]
    return layers, scheduler_args(profile)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
@pytest.mark.parametrize("shape", [SMT4, LAB2], ids=["4x2", "2x1"])
def test_golden_profiles_mutate_soundly(path: Path, shape: Shape) -> None:
    profile, _ = load_profile(path)
    found = all_mutations(profile, shape)
    assert len(found) >= 20
    for candidate in found:
        assert_sound(candidate, profile, shape)


def test_the_registry_order_and_nothing_skipped() -> None:
    assert [s.name for s in OPERATORS if s.apply is None] == []
    assert [s.name for s in OPERATORS] == [
        "treatment", "hot_threads", "cpu_fraction", "slice_us", "weight", "preempt", "preempt_first",
        "preemptible", "protected", "exclusive",
        "exclusive_slice", "catch_all", "scheduler", "merge", "join", "split", "reserve"]


# --- each operator does what its name says ------------------------------------------------------


def golden(name: str) -> Profile:
    return load_profile(GOLDEN[0].parent / f"{name}.toml")[0]


def group(profile: Profile, name: str) -> Group:
    return next(g for g in profile.groups if g.name == name)


def others_unchanged(parent: Profile, child: Profile, name: str) -> None:
    assert [g for g in parent.groups if g.name != name] == [g for g in child.groups if g.name != name]


def test_treatment_changes_only_that_group() -> None:
    rolesim = golden("rolesim")
    found = {c.name: c for c in treatments(rolesim, SMT4)}
    assert len(found) == 4 * len(rolesim.groups)
    batch = found["hot:treatment=batch"]
    assert group(batch.profile, "hot").treatment is Treatment.BATCH
    assert group(batch.profile, "hot").hot_threads == 2
    others_unchanged(rolesim, batch.profile, "hot")
    made_exclusive = found["worker:treatment=exclusive"]
    assert group(made_exclusive.profile, "worker").hot_threads == 1
    assert "sized for 1 hot thread" in made_exclusive.description
    assert "hot:treatment=exclusive" not in found


def test_hot_threads_and_cpu_fraction_move_exclusive_cores_by_one() -> None:
    rolesim = golden("rolesim")
    hot = {c.name: group(c.profile, "hot") for c in hot_threads(rolesim, SMT4)}
    assert {n: g.exclusive_cores() for n, g in hot.items()} == {
        "hot:hot_threads=3": 3, "hot:hot_threads=1": 1}
    assert {c.name for c in hot_threads(golden("redis"), SMT4)} == {"redis-server:hot_threads=2"}
    fractions = {c.name: group(c.profile, "hot") for c in cpu_fractions(rolesim, SMT4)}
    assert {n: (g.cpu_fraction, g.exclusive_cores()) for n, g in fractions.items()} == {
        "hot:cpu_fraction=0.5": (0.5, 1)}
    three = group(rolesim, "hot").model_copy(update={"hot_threads": 3, "cpu_fraction": 0.5})
    profile = rolesim.model_copy(update={"groups": [three, *rolesim.groups[1:]]})
    stepped = {c.name: group(c.profile, "hot").exclusive_cores() for c in cpu_fractions(profile, SMT4)}
    assert stepped == {"hot:cpu_fraction=0.33": 1, "hot:cpu_fraction=1": 3}  # from 2 cores


def test_slices_and_weights_halve_and_double_within_bounds() -> None:
    rolesim = golden("rolesim")
    found = {c.name: c for c in slices(rolesim, SMT4)}
    assert group(found["worker:slice_us=500"].profile, "worker").slice_us == 500
    assert group(found["hot:slice_us=4000"].profile, "hot").slice_us == 4000   # the preset's 2000 x2
    assert group(found["hot:slice_us=1000"].profile, "hot").slice_us == 1000
    heavy = rolesim.model_copy(update={"groups": [
        group(rolesim, "hot").model_copy(update={"weight": 10000}),
        group(rolesim, "worker").model_copy(update={"weight": 1}), *rolesim.groups[2:]]})
    names = {c.name for c in weights(heavy, SMT4)}
    assert names == {"hot:weight=5000"}  # 10000 is the bound; 20000 is out of it
    # an Open layer's weight is never read by scx_layered 1.1.4's BPF: no candidate for it
    assert not [c for c in weights(rolesim, SMT4) if not c.name.startswith("hot:")]


def test_merge_concatenates_adjacent_groups_of_one_treatment() -> None:
    rolesim = golden("rolesim")
    (merged,) = merges(rolesim, SMT4)
    assert merged.name == "merge:worker+feeder"
    names = [g.name for g in merged.profile.groups]
    assert names == ["hot", "worker-feeder", "housekeep", "other"]
    both = group(merged.profile, "worker-feeder")
    assert both.match == ["worker-*", "feeder"]
    assert both.treatment is Treatment.LATENCY
    assert both.evidence is not None
    assert both.evidence.names == ["worker-0", "worker-1", "feeder"]
    assert both.evidence.cpu_share == pytest.approx(0.065)
    assert both.evidence.slice_p99_us is None  # percentiles cannot be combined
    # different settings: not merged
    slow = rolesim.model_copy(update={"groups": [
        *rolesim.groups[:2], group(rolesim, "feeder").model_copy(update={"slice_us": 5000}),
        *rolesim.groups[3:]]})
    assert merges(slow, SMT4) == []


def redis_like() -> Profile:
    """Redis as synthesized on the lab's 2 vCPUs: the polling I/O thread exclusive, the main thread
    latency without preempt (a poller), housekeeping after them."""
    io = Group(name="io_thd", match=["io_thd_*"], treatment=Treatment.EXCLUSIVE, hot_threads=1,
               evidence=Evidence(names=["io_thd_1"], threads=1, cpu_share=0.91))
    main = Group(name="redis-server", match=["redis-server"], treatment=Treatment.LATENCY, preempt=False,
                 evidence=Evidence(names=["redis-server"], threads=1, cpu_share=0.37))
    bio = Group(name="bio", match=["bio_*"], treatment=Treatment.HOUSEKEEPING)
    return Profile(schema_version=1, name="redis", workload=Workload(process="redis-server"),
                   group=[io, main, bio])


def test_join_puts_an_adjacent_group_on_the_exclusive_groups_cores() -> None:
    (joined,) = joins(redis_like(), synthetic(2, 1))
    assert joined.name == "join:redis-server>io_thd"
    assert [g.name for g in joined.profile.groups] == ["io_thd-redis-server", "bio"]
    both = group(joined.profile, "io_thd-redis-server")
    # the exclusive group's settings and size; the guest's own options gone; patterns in order
    assert (both.treatment, both.hot_threads, both.exclusive_cores()) == (Treatment.EXCLUSIVE, 1, 1)
    assert both.match == ["io_thd_*", "redis-server"] and both.preempt is None
    assert both.evidence is not None and both.evidence.names == ["io_thd_1", "redis-server"]
    assert both.evidence.cpu_share == pytest.approx(1.28)
    assert not validation_errors(joined.profile)
    assert compiled_config(joined.profile, synthetic(2, 1))  # it compiles for the lab's shape
    # rolesim: the workers may join hot (adjacent); the feeder is not adjacent to hot
    assert [c.name for c in joins(golden("rolesim"), SMT4)] == ["join:worker>hot"]
    # two exclusive groups, or none, adjacent: nothing to join; a catch-all pattern never joins
    no_exclusive = redis_like().model_copy(update={"groups": [
        redis_like().groups[0].model_copy(update={"treatment": Treatment.LATENCY, "hot_threads": 0}),
        *redis_like().groups[1:]]})
    assert joins(no_exclusive, SMT4) == []
    star = redis_like().model_copy(update={"groups": [
        redis_like().groups[0], Group(name="other", match=["*"], treatment=Treatment.DEFAULT)]})
    assert joins(star, SMT4) == []


def test_split_makes_one_group_per_pattern_and_shares_hot_threads() -> None:
    hot = Group(name="hot", match=["hot-*", "gc-*"], treatment=Treatment.EXCLUSIVE, hot_threads=3,
                evidence=Evidence(names=["hot-0", "hot-1", "gc-0"], threads=3))
    rest = Group(name="io", match=["io_*"], treatment=Treatment.LATENCY)
    profile = Profile(schema_version=1, name="p", workload=Workload(process="p"), group=[hot, rest])
    (split,) = splits(profile, SMT4)
    assert split.name == "split:hot"
    parts = split.profile.groups
    assert [(g.name, g.match, g.hot_threads) for g in parts] == [
        ("hot.1", ["hot-*"], 2), ("hot.2", ["gc-*"], 1), ("io", ["io_*"], 0)]
    assert all(g.treatment is Treatment.EXCLUSIVE for g in parts[:2])
    # a part that would be exclusive with nothing to size it: no split offered
    one = profile.model_copy(update={"groups": [hot.model_copy(update={"hot_threads": 1}), rest]})
    assert splits(one, SMT4) == []
    # a pod's request cannot be divided by pattern
    pod = profile.model_copy(update={"groups": [hot.model_copy(update={"request_millicores": 2000}),
                                                rest]})
    assert splits(pod, SMT4) == []


def test_reserve_is_a_shape_override_not_a_profile_change() -> None:
    rolesim = golden("rolesim")
    found = {c.name: c for c in reserves(rolesim, LAB2)}
    assert list(found) == ["reserve_cores=0"]
    candidate = found["reserve_cores=0"]
    assert candidate.profile == rolesim
    assert candidate.shape_for(LAB2).reserve_cores == 0
    assert candidate.shape_for(LAB2).siblings == LAB2.siblings
    assert Candidate("x", "y", rolesim).shape_for(LAB2) is LAB2
    assert [c.name for c in reserves(rolesim, synthetic(4, 2, 2))] == ["reserve_cores=1",
                                                                       "reserve_cores=3"]
    no_exclusive = rolesim.model_copy(update={"groups": rolesim.groups[1:]})
    assert reserves(no_exclusive, SMT4) == []


def test_changes_that_compile_identically_are_dropped() -> None:
    rolesim = golden("rolesim")
    # on 4x2 the reserve does not change what the hot group gets: no reserve candidates
    assert not [c for c in all_mutations(rolesim, SMT4) if c.reserve_cores is not None]
    # on 2x1 the hot group is demoted (2 cores wanted, 1 free); one more hot thread keeps it so
    lab = {c.name for c in all_mutations(rolesim, LAB2)}
    assert "hot:hot_threads=3" not in lab
    assert {"hot:hot_threads=1", "reserve_cores=0"} <= lab


def test_a_scheduler_change_is_no_noop_though_the_layers_are_identical() -> None:
    """A [scheduler] candidate compiles to the parent's layers; its flags make it a change."""
    rolesim = golden("rolesim")
    found = {c.name: c for c in all_mutations(rolesim, SMT4)}
    assert {"scheduler:interval_ms=1000", "scheduler:interval_ms=10000"} <= set(found)
    for name, seconds in (("scheduler:interval_ms=1000", "1"), ("scheduler:interval_ms=10000", "10")):
        candidate = found[name]
        assert compiled_config(candidate.profile, SMT4)[0] == compiled_config(rolesim, SMT4)[0]
        assert scheduler_args(candidate.profile) == ("--interval", seconds)
        assert_sound(candidate, rolesim, SMT4)
    # the preset written out is no change at all: not offered, and equal to the parent
    preset = rolesim.model_copy(update={"scheduler": Scheduler(interval_ms=SCHEDULER_INTERVAL_MS)})
    assert compiled(preset, SMT4) == compiled(rolesim, SMT4)
    assert [c.name for c in all_mutations(preset, SMT4) if c.name.startswith("scheduler:")] == [
        "scheduler:interval_ms=1000", "scheduler:interval_ms=10000"]


# --- vet ----------------------------------------------------------------------------------------

NO_ORACLE = {"check": lambda config, args: []}


def test_vet_rejects_an_invalid_profile_at_validate() -> None:
    rolesim = golden("rolesim")
    twin = rolesim.model_copy(update={"groups": [*rolesim.groups, rolesim.groups[1]]})
    result = vet(Candidate("twin", "duplicate group", twin), SMT4, **NO_ORACLE)
    assert isinstance(result, Rejected)
    assert result.stage == "validate"
    assert "duplicate_name" in result.reason


def test_vet_rejects_lint_errors_on_the_candidates_shape() -> None:
    rolesim = golden("rolesim")
    result = vet(Candidate("start", "as synthesized", rolesim), LAB2, **NO_ORACLE)
    assert isinstance(result, Rejected)
    assert (result.stage, result.reason.split(":")[0]) == ("lint", "oversubscribed")
    freed = vet(Candidate("reserve_cores=0", "", rolesim, reserve_cores=0), LAB2, **NO_ORACLE)
    assert isinstance(freed, Vetted)
    assert freed.shape.reserve_cores == 0


def test_vet_reports_oracle_mismatches_and_refusals() -> None:
    candidate = Candidate("start", "", golden("redis"))
    mismatch = vet(candidate, SMT4, check=lambda config, args: ["rest.Open.weight: dropped by scx_layered"])
    assert isinstance(mismatch, Rejected)
    assert mismatch.stage == "oracle" and "weight: dropped" in mismatch.reason

    def refuses(specs: object, args: object) -> list[str]:
        raise ThreadwiseError("scx_layered rejected the config: bad")

    refused = vet(candidate, SMT4, check=refuses)
    assert isinstance(refused, Rejected) and refused.reason.endswith("bad")

    def missing(specs: object, args: object) -> list[str]:
        raise MissingTool("scx_layered 1.1.4 not found")

    with pytest.raises(MissingTool):
        vet(candidate, SMT4, check=missing)


def test_vetted_carries_the_compiled_config() -> None:
    redis = golden("redis")
    seen: list[object] = []
    result = vet(Candidate("start", "", redis), SMT4, check=lambda config, args: seen.append(config) or [])
    assert isinstance(result, Vetted)
    config, _ = compiled_config(redis, SMT4)
    assert result.config == config
    assert seen == [config]   # the oracle is handed the typed config
    assert result.config.layer_names()[-1] == "rest"


def test_a_vetted_profiles_arm_is_the_ladder_arm_of_it_compiled_for_its_shape() -> None:
    redis = golden("redis")
    vetted = vet(Candidate("start", "the start profile", redis), SMT4, check=lambda config, args: [])
    assert isinstance(vetted, Vetted)
    arm = vetted.arm("start")
    assert (arm.name, arm.profile_toml, arm.scx_args) == ("start", toml_text(redis), scheduler_args(redis))
    assert arm.config == compiled_config(redis, SMT4)[0] and not arm.is_baseline


# --- the real scx_layered ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def scx_binary() -> Path:
    try:
        return oracle.find_binary()
    except MissingTool as missing:
        pytest.skip(f"{missing.message}: {missing.hint}")


@pytest.mark.scx
@pytest.mark.slow
@pytest.mark.parametrize("name", ["rolesim", "redis"])
@pytest.mark.parametrize("shape", [SMT4, LAB2], ids=["4x2", "2x1"])
def test_golden_mutations_pass_the_real_oracle(scx_binary: Path, name: str, shape: Shape) -> None:
    profile = golden(name)
    results = [vet(c, shape) for c in all_mutations(profile, shape)]
    stages = {r.stage for r in results if isinstance(r, Rejected)}
    assert stages <= {"lint"}, [r.reason for r in results if isinstance(r, Rejected)]
    assert sum(isinstance(r, Vetted) for r in results) >= 5


@pytest.mark.scx
@pytest.mark.slow
@given(profile=profiles(), shape=SHAPES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_generated_mutations_pass_the_real_oracle(scx_binary: Path, profile: Profile,
                                                  shape: Shape) -> None:
    assume(not validation_errors(profile))
    for candidate in all_mutations(profile, shape):
        result = vet(candidate, shape)
        assert isinstance(result, Vetted) or result.stage == "lint", result


def test_a_title_group_merges_only_with_another_title_group():
    """A title group's layer is matched by its hint alone (HintEquals): merged with a comm group it
    would hold `match` beside `title`, which the schema refuses (a training of PostgreSQL crashed
    reading such a candidate back, 2026-12-05)."""
    from threadwise.refine.search.mutate import merges
    from threadwise.synthesize.api import load_valid, validation_errors

    profile = load_valid(Path(__file__).resolve().parents[1] / "data" / "lab" / "postgres-titles.toml")
    names = [c.name for c in merges(profile, synthetic(2))]
    assert "merge:backends+postgres" not in names   # title group beside the comm group, both default
    titled = profile.groups[2].model_copy(update={"match": ["postgres"]})
    broken = profile.model_copy(update={"groups": [*profile.groups[:2], titled, *profile.groups[3:]]})
    assert any(e.startswith("schema: ") for e in validation_errors(broken))
