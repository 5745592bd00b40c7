"""bpf tier: a real JVM service with named pools (refine/workloads/PoolService.java), observed live.

The profile stays within the group budget, folds the idle JVM internals into the
workload's catch-all, and finds the pool's wake chain (request-* -> writer, acceptor).
Assertions are relative: other load on this host may take CPU at any time.
"""

from __future__ import annotations

import polars as pl
import pytest

from threadwise.analyze import analyze_capture
from threadwise.shape import parse_shape
from threadwise.synthesize.build import build_profile, from_analysis
from threadwise.synthesize.compact import IDLE_CPU_SHARE
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.writer import dumps

pytestmark = pytest.mark.bpf

JVM_INTERNALS = ("C1 CompilerThre", "C2 CompilerThre", "Signal Dispatch", "Service Thread",
                 "Sweeper thread", "VM Thread", "java")


@pytest.fixture(scope="module")
def jvm(jvm_capture):
    analysis = analyze_capture(jvm_capture)
    return analysis, build_profile(from_analysis(analysis), "jvm", capture="jvm.duckdb")


def test_the_pool_wake_chain_is_found(jvm):
    analysis, _ = jvm
    chains = analysis.pattern_chains.filter(pl.col("busiest"))
    found = {tuple(p) for p in chains["patterns"].to_list()}
    evidence = (analysis.pattern_chains, analysis.wake_edges.head(12))
    assert ("request-*", "writer") in found and ("request-*", "acceptor") in found, evidence
    groups = {r["pattern"]: r for r in analysis.groups.iter_rows(named=True)}
    for pattern in ("request-*", "writer", "acceptor"):
        assert groups[pattern]["in_wake_chain"], (pattern, evidence)
    pool = analysis.wake_edges.filter((pl.col("wakee") == "writer") & pl.col("causal"))
    assert pool["waker"].str.starts_with("request-").all() and pool.height >= 2, evidence
    assert not groups["flusher"]["in_wake_chain"]


def test_profile_is_compact_and_folds_the_jvm_internals(jvm):
    analysis, profile = jvm
    assert analysis.groups.height > 12          # what the analysis sees: one group per name
    assert len(profile.groups) <= 6, [g.name for g in profile.groups]
    rest = profile.groups[-1]
    assert rest.match == ["*"] and rest.evidence is not None
    share = {r["pattern"]: r["cpu_share"] for r in analysis.groups.iter_rows(named=True)}
    folded = 0
    for name in JVM_INTERNALS:
        if share.get(name, 0.0) >= IDLE_CPU_SHARE:   # it worked in this capture (a JIT burst)
            continue
        folded += 1
        assert name in rest.evidence.names, (name, rest.evidence.names)
        assert name.split("#")[0] in (rest.comment or ""), rest.comment
    assert folded >= 5, share
    by_thread = {n: g for g in profile.groups[:-1] for n in (g.evidence.names if g.evidence else [])}
    # GC threads idle in the capture: the jvm-gc family decides (batch), and says so; or,
    # had they run, their measured role would decide
    gc = by_thread.get("GC Thread#0")
    if gc is not None:
        assert gc.family == "jvm-gc" and "family jvm-gc" in (gc.comment or ""), dumps(profile)
    else:
        assert "GC Thread#0" in rest.evidence.names
    assert by_thread["writer"].treatment.value == "latency", dumps(profile)
    assert by_thread["acceptor"].treatment.value == "latency", dumps(profile)
    assert by_thread["request-0"].evidence.in_wake_chain
    # every layer name is whole words (no `VM-Periodic-Tas`)
    assert not any(g.name.endswith(("-Tas", "-Thre", "-Dispatc")) for g in profile.groups)


def test_profile_validates_and_compiles(jvm):
    _, profile = jvm
    text = dumps(profile)
    parsed, source = parse_profile(text, "jvm.toml")
    assert [d for d in validate(parsed, source, "jvm.toml") if d.severity == "error"] == [], text
    layers = compile_profile(parsed, parse_shape("cores=4,threads-per-core=2")).config.to_json_data()
    assert layers[-2]["matches"] == [[{"PcommPrefix": "java"}]] and layers[-1]["name"] == "rest"
