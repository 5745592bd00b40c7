"""Busy-pollers (issue 23): synthesize never gives a poller preempt on shared CPUs.

A latency group of pollers gets exclusive cores when every thread of it is hot, else the latency
layer with `preempt = false`; other treatments are left alone (they do not preempt, or only on
cores of their own). The profile's comment says why, with the numbers; compact keeps a poller
group apart from preempting ones; the real scx_layered reads the layer back as not preempting.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.synthesize.test_properties import ANALYSES, ROWS
from threadwise.analyze.contract import AnalysisRecord, GroupRow, Role
from threadwise.errors import InputError
from threadwise.shape import Shape, synthetic
from threadwise.synthesize import oracle
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Profile, Treatment
from threadwise.synthesize.writer import dumps

SECOND = 1_000_000_000
IO_LAB = "io_thd_1 0.71 CPU at 16.6 wakeups/s (43 ms of CPU per wakeup)"


def _row(pattern: str, role: Role, *, share: float, wakeups_per_s: float, threads: int = 1,
         hot: int = 0, pollers: int = 0, evidence: str | None = None, chain: bool = True,
         confidence: float = 0.99) -> GroupRow:
    names = [pattern.rstrip("*") + str(i) for i in range(1, threads + 1)] if threads > 1 or "*" in pattern \
        else [pattern]
    return GroupRow(pattern=pattern, role=role, confidence=confidence,
                    match_prefixes=[pattern.rstrip("*")], thread_count=threads, names=names,
                    cpu_time_ns=int(share * 8 * SECOND), cpu_share=share, max_thread_share=share / threads,
                    hot_threads=hot, wakeups_per_s=wakeups_per_s, slice_p50_ns=48_000,
                    slice_p99_ns=3_000_000, in_wake_chain=chain, poller_threads=pollers,
                    poller_evidence=evidence)


def _redis_lab(**io: Any) -> AnalysisRecord:
    """The lab's Redis (profiles/redis.toml's evidence): io_thd_1 0.71 CPU at 16.55 wakeups/s."""
    io_row = _row("io_thd_*", Role.LATENCY, share=0.7144, wakeups_per_s=16.55, hot=1, pollers=1,
                  evidence=IO_LAB)
    main = _row("redis-server", Role.LATENCY, share=0.5119, wakeups_per_s=545.2, hot=1)
    return AnalysisRecord(process_name="redis-server", duration_ns=8 * SECOND, nr_cpus=2,
                          groups=[replace(io_row, **io), main])


def _group(profile: Profile, name: str) -> Any:
    return next(g for g in profile.groups if name in g.match[0])


def _layers(profile: Profile, shape: Shape) -> dict[str, tuple[str, dict[str, Any]]]:
    specs = compile_profile(profile, shape).config.to_json_data()
    return {s["name"]: next(iter(s["kind"].items())) for s in specs}


def _no_preempt_on_shared_cpus(profile: Profile, shape: Shape, groups: list[str]) -> None:
    """Each named group's layer is Confined (cores of its own) or does not preempt."""
    layers = _layers(profile, shape)
    for name in groups:
        kind, options = layers[name]
        assert kind == "Confined" or not options.get("preempt", False), (name, kind, options)


def test_a_hot_latency_poller_gets_exclusive_cores() -> None:
    profile = build_profile(_redis_lab(), "redis")
    io = _group(profile, "io_thd_")
    assert io.treatment is Treatment.EXCLUSIVE and io.hot_threads == 1 and io.preempt is None
    assert io.comment is not None and f"poller: {IO_LAB}: exclusive cores" in io.comment, io.comment
    assert "suggests latency; the measured evidence decided exclusive" in io.comment   # family redis-io
    assert profile.groups[0] is io   # exclusive first: it takes its cores before anyone else
    # on a 4-core shape it has a core of its own; on the lab's 2 vCPUs (1 reserved) too
    for shape in (synthetic(4, 2), synthetic(2, 1)):
        assert _layers(profile, shape)[io.name][0] == "Confined"
        _no_preempt_on_shared_cpus(profile, shape, [io.name])
    # the main thread is no poller (0.94 ms per wakeup in TCG, but analyze did not mark it here)
    assert _group(profile, "redis-server").treatment is Treatment.LATENCY


def test_a_poller_that_does_not_fit_is_demoted_without_preempt() -> None:
    both = AnalysisRecord(process_name="redis-server", duration_ns=8 * SECOND, nr_cpus=2, groups=[
        _row("io_thd_*", Role.LATENCY, share=0.7144, wakeups_per_s=16.55, hot=1, pollers=1, evidence=IO_LAB),
        _row("spin", Role.COMPUTE, share=0.95, wakeups_per_s=0.0, hot=1, pollers=1, chain=False)])
    profile = build_profile(both, "two")
    layers = _layers(profile, synthetic(2, 1))    # one core for two exclusive groups
    kinds = {name: kind for name, (kind, _) in layers.items()}
    assert sorted(kinds.values()) == ["Confined", "Grouped", "Open"], kinds
    _no_preempt_on_shared_cpus(profile, synthetic(2, 1), [g.name for g in profile.groups])


def test_a_poller_that_is_not_hot_keeps_latency_without_preempt() -> None:
    text = "io_thd_1 0.39 CPU at 518 wakeups/s (0.76 ms of CPU per wakeup)"
    profile = build_profile(_redis_lab(cpu_share=0.392, max_thread_share=0.392, wakeups_per_s=518.0,
                                       hot_threads=0, poller_evidence=text), "redis")
    io = _group(profile, "io_thd_")
    assert io.treatment is Treatment.LATENCY and io.preempt is False
    assert io.comment is not None and f"poller: {text}: latency without preempt" in io.comment, io.comment
    kind, options = _layers(profile, synthetic(4, 2))[io.name]
    assert kind == "Open" and options["preempt"] is False and options["slice_us"] == 1000
    # written, read back, valid; the TOML says it does not preempt and why
    written = dumps(profile)
    assert parse_profile(written, "p.toml")[0] == profile
    assert dumps(parse_profile(written, "p.toml")[0]) == written
    assert [d for d in validate(profile) if d.severity == "error"] == []
    assert "# latency: runs short slices, does not preempt (override below)" in written
    assert "#   preempt true -> false" in written and "preempt = false" in written
    assert "poller: io_thd_1 0.39 CPU at 518 wakeups/s" in written


def test_a_pool_with_some_pollers_keeps_latency_without_preempt() -> None:
    """One hot poller among three threads: exclusive cores for one hot thread would squeeze the
    other two onto its core, so the group stays latency, without preempt, and says how many."""
    pool = _row("io_thd_*", Role.LATENCY, share=1.1, wakeups_per_s=900.0, threads=3, hot=1, pollers=1,
                evidence="io_thd_1 0.60 CPU at 20 wakeups/s (30 ms of CPU per wakeup)")
    profile = build_profile(AnalysisRecord(process_name="redis-server", duration_ns=8 * SECOND, nr_cpus=4,
                                           groups=[pool]), "pool")
    io = _group(profile, "io_thd_")
    assert io.treatment is Treatment.LATENCY and io.preempt is False
    assert io.comment is not None and "poller (1 of 3 threads): io_thd_1 0.60 CPU" in io.comment


@pytest.mark.parametrize(("role", "treatment"), [
    (Role.COMPUTE, Treatment.EXCLUSIVE), (Role.BATCH, Treatment.BATCH),
    (Role.HOUSEKEEPING, Treatment.HOUSEKEEPING)])
def test_other_treatments_are_left_alone(role: Role, treatment: Treatment) -> None:
    """rolesim's hot-0 (0.955 CPU, never woken) is a poller by the rule and keeps exclusive cores;
    batch and housekeeping do not preempt: nothing to change, nothing to say."""
    row = _row("hot-*", role, share=0.955, wakeups_per_s=0.0, hot=1, pollers=1, chain=False,
               evidence="hot-0 0.95 CPU at 0 wakeups/s (never woken)")
    profile = build_profile(AnalysisRecord(process_name="rolesim", duration_ns=8 * SECOND, nr_cpus=2,
                                           groups=[row]), "r")
    hot = _group(profile, "hot-")
    assert hot.treatment is treatment and hot.preempt is None
    assert "poller" not in (hot.comment or "")


def test_a_low_confidence_poller_is_default() -> None:
    """No family to decide: a role at low confidence is default, which does not preempt."""
    spin = _row("spinner", Role.LATENCY, share=0.6, wakeups_per_s=5.0, hot=1, pollers=1, confidence=0.3)
    profile = build_profile(AnalysisRecord(process_name="svc", duration_ns=8 * SECOND, nr_cpus=2,
                                           groups=[spin]), "svc")
    group = _group(profile, "spinner")
    assert group.treatment is Treatment.DEFAULT and group.preempt is None
    _no_preempt_on_shared_cpus(profile, synthetic(4, 2), [group.name])


@pytest.mark.parametrize("thin", [{"role": Role.DEFAULT}, {"confidence": 0.3}])
def test_a_family_that_decides_latency_does_not_bring_preempt_back(thin: dict[str, Any]) -> None:
    """Thin evidence (no role, or low confidence): the redis-io family decides latency; the poller
    still gets no preempt."""
    profile = build_profile(_redis_lab(**thin), "redis")
    io = _group(profile, "io_thd_")
    assert io.family == "redis-io" and io.treatment is Treatment.LATENCY and io.preempt is False
    assert io.comment is not None and "the family decided" in io.comment and f"poller: {IO_LAB}" in io.comment


def test_compact_keeps_a_poller_apart_from_preempting_groups() -> None:
    """Two latency groups that would merge (same role, chain, similar CPU) stay apart when one is a
    poller without preempt, under any budget (the smaller one folds instead)."""
    a = _row("io_thd_*", Role.LATENCY, share=0.3, wakeups_per_s=400.0, pollers=1,
             evidence="io_thd_1 0.30 CPU at 400 wakeups/s (0.75 ms of CPU per wakeup)")
    b = _row("net_*", Role.LATENCY, share=0.3, wakeups_per_s=400.0)
    record = AnalysisRecord(process_name="svc", duration_ns=8 * SECOND, nr_cpus=2, groups=[a, b])
    for budget in (6, 2, 1):
        profile = build_profile(record, "svc", max_groups=budget)
        for group in profile.groups:
            pollers = "io_thd_*" in group.match
            assert not (pollers and "net_*" in group.match), dumps(profile)
            if pollers:
                assert group.treatment is not Treatment.LATENCY or group.preempt is False, dumps(profile)
        _no_preempt_on_shared_cpus(profile, synthetic(2, 1),
                                   [g.name for g in profile.groups if "io_thd_*" in g.match])


POLLERS_ONLY = ANALYSES.flatmap(lambda a: st.lists(
    ROWS.filter(lambda r: r.poller_threads >= 1), min_size=1, max_size=8).map(
        lambda rows: replace(a, groups=rows)))


@given(POLLERS_ONLY, st.integers(1, 8), st.integers(1, 2), st.integers(1, 6))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_layer_of_pollers_preempts_on_shared_cpus(analysis: AnalysisRecord, cores: int, tpc: int,
                                                     budget: int) -> None:
    """Whatever the roles, confidences, families, merges and machine: when every group of the
    analysis has pollers, every compiled layer is Confined (cores of its own) or does not preempt."""
    try:
        profile = build_profile(analysis, "gen", max_groups=budget)
    except InputError:   # nothing expressible as a comm prefix (test_properties covers it)
        return
    shape = synthetic(cores, tpc)
    _no_preempt_on_shared_cpus(profile, shape, list(_layers(profile, shape)))


@pytest.mark.scx
def test_scx_layered_reads_the_poller_layers_as_not_preempting(scx_binary: Path) -> None:
    """The oracle (--print-and-exit): the non-hot poller's Open layer and the demoted one do not
    preempt; the hot one is Confined to a core of its own (protected), with the exclusive preset's
    preempt (none since the lab re-derivation; it would act only on its own cores)."""
    shape = synthetic(2, 1)
    cool = build_profile(_redis_lab(cpu_share=0.392, max_thread_share=0.392, wakeups_per_s=518.0,
                                    hot_threads=0), "cool")
    hot = build_profile(AnalysisRecord(
        process_name="redis-server", duration_ns=8 * SECOND, nr_cpus=2, groups=[
            _row("spin", Role.COMPUTE, share=0.95, wakeups_per_s=0.0, hot=1, pollers=1, chain=False),
            _row("io_thd_*", Role.LATENCY, share=0.7144, wakeups_per_s=16.55, hot=1, pollers=1,
                 evidence=IO_LAB)]), "hot")
    for profile, expected in ((cool, {"io_thd": ("Open", False)}),
                              (hot, {"io_thd": ("Grouped", False), "spin": ("Confined", False)})):
        config = compile_profile(profile, shape).config
        back = {spec.name: spec.kind.to_json_data() for spec in oracle.print_and_exit(config, scx_binary)}
        for name, (kind, preempt) in expected.items():
            assert list(back[name]) == [kind], (name, back[name])
            assert back[name][kind]["preempt"] is preempt, (name, back[name])
        if "spin" in back:
            assert back["spin"]["Confined"]["protected"] is True, back["spin"]
        assert oracle.check(config, scx_binary) == []
