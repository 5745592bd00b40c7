"""Compact profiles: idle groups fold into the workload's catch-all, look-alikes merge,
the group budget holds, and every decision is written where a reviewer reads it."""

from __future__ import annotations

from typing import Any

import pytest

from threadwise.analyze.contract import AnalysisRecord, GroupRow
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compact import apart, compact, readable_name
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Evidence, Group
from threadwise.synthesize.writer import dumps


def row(pattern: str, role: str, share: float, **extra: Any) -> GroupRow:
    names = extra.pop("names", [pattern.rstrip("*") + ("0" if pattern.endswith("*") else "")])
    base: dict[str, Any] = dict(
        pattern=pattern, role=role, confidence=0.95, match_prefixes=[pattern.rstrip("*")],
        thread_count=len(names), names=names, cpu_time_ns=int(share * 5e9), cpu_share=share,
        max_thread_share=share / len(names), hot_threads=0, wakeups_per_s=10.0,
        slice_p50_ns=20_000, slice_p99_ns=200_000)
    base.update(extra)
    return GroupRow(**base)


def jvm_like() -> AnalysisRecord:
    """The issue's JVM: a busy request pool, writer and acceptor, a flusher, idle internals."""
    internals = ["C1 CompilerThre", "C2 CompilerThre", "Signal Dispatch", "Service Thread",
                 "Sweeper thread", "VM Thread", "VM Periodic Tas", "GC Thread#*", "java"]
    groups = [
        row("request-*", "compute", 1.9, names=["request-0", "request-1", "request-2"],
            hot_threads=3, in_wake_chain=True, slice_p50_ns=3_000_000),
        row("writer", "latency", 0.05, in_wake_chain=True, wakeups_per_s=5700.0),
        row("acceptor", "latency", 0.04, in_wake_chain=True, wakeups_per_s=3700.0),
        row("flusher", "housekeeping", 0.002, wakeups_per_s=10.0),
        *[row(name, "default", 0.0, wakeups_per_s=0.0, names=[name.rstrip("*")])
          for name in internals],
    ]
    return AnalysisRecord(process_name="java", duration_ns=5_000_000_000, nr_cpus=2, groups=groups)


def test_jvm_like_profile_is_compact_and_says_why() -> None:
    profile = build_profile(jvm_like(), "jvm")
    names = [g.name for g in profile.groups]
    assert names == ["request", "writer-and-acceptor", "GC-Thread", "flusher", "other"], names
    merged, rest = profile.groups[1], profile.groups[-1]
    assert merged.match == ["writer", "acceptor"] and merged.treatment.value == "latency"
    assert merged.evidence is not None and merged.evidence.threads == 2
    assert merged.comment is not None and merged.comment.startswith("merged: same treatment")
    assert rest.match == ["*"] and rest.treatment.value == "default"
    assert rest.comment is not None
    for internal in ("C1 CompilerThre", "VM Periodic Tas", "java"):
        assert f"  {internal} (default, 1 thr, 0 CPUs" in rest.comment, rest.comment
    # idle, but a known family (GC) gives it a treatment of its own, and the comment says so
    gc = profile.groups[2]
    assert gc.treatment.value == "batch" and gc.family == "jvm-gc" and gc.match == ["GC Thread#"]
    assert "the family decided: the evidence is thin" in (gc.comment or "")
    assert "folded, < 0.001 CPUs and on no wake chain:" in rest.comment
    assert profile.comment is not None and "13 analysis groups -> 5 groups" in profile.comment
    text = dumps(profile)
    assert [d for d in validate(parse_profile(text, "jvm.toml")[0]) if d.severity == "error"] == []
    assert parse_profile(text, "jvm.toml")[0] == profile and dumps(parse_profile(text, "x")[0]) == text


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 6])
def test_budget_holds(budget: int) -> None:
    profile = build_profile(jvm_like(), "jvm", max_groups=budget)
    assert len(profile.groups) <= max(budget, 1)
    assert [d for d in validate(profile) if d.severity == "error"] == []
    every = {n for g in profile.groups for n in (g.evidence.names if g.evidence else [])}
    assert {"request-0", "writer", "acceptor", "flusher", "java"} <= every


def test_budget_two_keeps_the_pool_and_folds_the_rest() -> None:
    profile = build_profile(jvm_like(), "jvm", max_groups=2)
    assert [g.name for g in profile.groups] == ["request", "other"]
    rest = profile.groups[-1].comment or ""
    assert "folded, over the budget of 2 groups:" in rest and "writer, acceptor (latency" in rest


def group(name: str, treatment: str, share: float, **ev: Any) -> Group:
    return Group(name=name, match=[name], treatment=treatment,
                 evidence=Evidence(role=ev.pop("role", "latency"), threads=1, names=[name],
                                   cpu_share=share, **ev))


def test_evidence_keeps_groups_apart() -> None:
    a = group("a", "latency", 0.2, slice_p50_us=20.0, in_wake_chain=True)
    assert apart(a, group("b", "latency", 0.2, slice_p50_us=90.0, in_wake_chain=True)) \
        == "slice p50 20 vs 90 us"
    assert apart(a, group("c", "latency", 0.2, slice_p50_us=25.0)) == "one is on a wake chain"
    assert apart(a, group("d", "batch", 0.2, slice_p50_us=20.0, in_wake_chain=True)) \
        == "different treatments"
    # tiny CPU: slice differences are noise, nothing sets them apart
    assert apart(group("e", "latency", 0.002, slice_p50_us=2.0),
                 group("f", "latency", 0.003, slice_p50_us=90.0)) is None
    done = compact([a, group("b", "latency", 0.2, slice_p50_us=90.0, in_wake_chain=True)])
    assert [g.name for g in done.groups] == ["a", "b"] and done.merged == 0


@pytest.mark.parametrize(("pattern", "name"), [
    ("VM Periodic Tas", "VM-Periodic"), ("C1 CompilerThre", "C1"), ("io_thd_*", "io_thd"),
    ("GC Thread#*", "GC-Thread"), ("jemalloc_bg_thd", "jemalloc_bg_thd"),
    ("Reference Handl", "Reference"), ("redis-server", "redis-server"),
])
def test_layer_names_are_whole_words(pattern: str, name: str) -> None:
    assert readable_name(pattern) == name


def test_a_group_with_hot_threads_stays_apart() -> None:
    io = group("io", "latency", 0.69, slice_p50_us=4.0, in_wake_chain=True).model_copy(
        update={"hot_threads": 1})
    main = group("main", "latency", 0.39, slice_p50_us=4.0, in_wake_chain=True)
    assert apart(io, main) == "one has hot threads"
