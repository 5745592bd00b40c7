"""Placement lint: one negative test per invariant, with the message and threads checked."""

from __future__ import annotations

import json

import polars as pl
import pytest

from threadwise.errors import InputError
from threadwise.shape import synthetic
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.layered import LayerConfig
from threadwise.synthesize.layers import views_from_config, views_from_profile
from threadwise.synthesize.lint import CaptureFacts, ThreadFact, lint
from threadwise.synthesize.schema import Evidence, Group, Profile, Workload


def hot_group(hot: int, names: list[str], **extra: object) -> Group:
    return Group(name="hot", match=["hot-*"], treatment="exclusive", hot_threads=hot,
                 evidence=Evidence(names=names, threads=len(names)), **extra)


def profile(*groups: Group) -> Profile:
    return Profile(schema_version=1, name="t", workload=Workload(process="svc"),
                   group=list(groups))


def run(p: Profile, shape=None, facts=None):
    shape = shape or synthetic(4, 2)
    return lint(views_from_profile(p, shape), shape, facts)


def test_clean_profile_has_no_findings(example: Profile) -> None:
    assert run(example, synthetic(8, 2)) == []


def test_smt_collision_on_a_one_core_budget_with_two_hot_threads() -> None:
    p = profile(hot_group(2, ["hot-0", "hot-1"], request_millicores=1000))
    [finding] = run(p, synthetic(4, 2))
    assert finding.lint == "smt_collision"
    assert finding.message == ("layer 'hot': 2 hot threads in 1 whole core (2 sibling CPUs): "
                               "1 must share a core with another hot thread")
    assert finding.threads == ("hot-0", "hot-1")
    assert "SMT siblings share one core" in finding.explanation


def test_smt_collision_when_demotion_leaves_one_core() -> None:
    findings = run(profile(hot_group(2, ["hot-0", "hot-1"])), synthetic(2, 2))
    assert [f.lint for f in findings] == ["smt_collision", "oversubscribed"]


def test_no_smt_collision_without_smt() -> None:
    p = profile(hot_group(2, ["hot-0", "hot-1"], request_millicores=1000))
    assert run(p, synthetic(4, 1)) == []


def test_oversubscribed() -> None:
    p = profile(hot_group(3, ["hot-0", "hot-1", "hot-2"]))
    [smt, over] = run(p, synthetic(2, 2))
    assert over.lint == "oversubscribed"
    assert over.message == ("exclusive groups ask for 3 whole cores (hot 3); the shape has 1 "
                            "(2 cores x 2 threads (4 CPUs), 1 reserved for the system)")
    assert over.threads == ("hot-0", "hot-1", "hot-2")
    assert smt.lint == "smt_collision"


def test_uncovered_needs_a_capture_and_names_busy_threads() -> None:
    p = profile(Group(name="io", match=["io_"], treatment="latency"))
    facts = CaptureFacts(10**9, [
        ThreadFact(1, "io_1", "svc", 0.2), ThreadFact(2, "compactor", "svc", 0.4),
        ThreadFact(3, "idle-one", "svc", 0.001), ThreadFact(4, "bash", "bash", 0.9, False)])
    assert run(p) == []
    [finding] = run(p, facts=facts)
    assert finding.lint == "uncovered"
    assert finding.message == ("1 busy threads of the workload match no group "
                               "(CPUs busy: compactor 0.40)")
    assert finding.threads == ("compactor",)


def test_overlap_shadowed_layer() -> None:
    p = profile(Group(name="io", match=["io_"], treatment="latency"),
                Group(name="iothd", match=["io_thd_"], treatment="batch",
                      evidence=Evidence(names=["io_thd_1"])))
    [finding] = run(p)
    assert finding.lint == "overlap"
    assert finding.message == ("layer 'iothd' match block 1 (io_thd_) can never fire: the "
                               "earlier layer 'io' takes every such thread")
    assert finding.threads == ("io_thd_1",)


def test_overlap_moved_threads_is_a_warning() -> None:
    p = profile(Group(name="w1", match=["worker-1"], treatment="latency"),
                Group(name="workers", match=["worker-"], treatment="batch",
                      evidence=Evidence(names=["worker-1", "worker-2"])))
    [finding] = run(p)
    assert (finding.lint, finding.severity, finding.threads) == ("overlap", "warning",
                                                                 ("worker-1",))


def test_observed_smt_collision_from_a_capture() -> None:
    p = profile(hot_group(2, ["hot-0", "hot-1"]))
    shape = synthetic(4, 2)
    threads = [ThreadFact(1, "hot-0", "svc", 0.9), ThreadFact(2, "hot-1", "svc", 0.9)]
    ms = 1_000_000
    # hot-0 on cpu 0 for 0-300 ms, hot-1 on its sibling cpu 1 for 200-400 ms: 100 ms together
    facts = CaptureFacts(1000 * ms, threads, corun={(1, 2): 100 * ms})
    [finding] = lint(views_from_profile(p, shape), shape, facts)
    assert finding.lint == "smt_collision"
    assert finding.message == ("observed: hot-0 and hot-1 ran on sibling CPUs of one core at the "
                               "same time for 100.0 ms (10.0% of the capture, threshold 5%)")
    assert finding.threads == ("hot-0", "hot-1")


def test_raw_layer_configs_are_linted_alike() -> None:
    """A hand-written pinned tier-style config: fixed Confined layers, exclusive."""
    specs = [
        {"name": "tier0", "matches": [[{"CommPrefix": "db"}]],
         "kind": {"Confined": {"util_range": [0.5, 0.9], "cpus_range": [8, 8],
                               "exclusive": True}}},
        {"name": "tier1", "matches": [[{"CommPrefix": "db_bg"}]], "kind": {"Open": {}}},
        {"name": "rest", "matches": [[]], "kind": {"Open": {}}},
    ]
    shape = synthetic(4, 2)
    facts = CaptureFacts(10**9, [ThreadFact(i, f"db{i}", "db", 0.9) for i in range(5)])
    config = LayerConfig.from_json_data(json.loads(json.dumps(specs)))
    findings = lint(views_from_config(config, shape), shape, facts)
    assert [f.lint for f in findings] == ["smt_collision", "oversubscribed", "overlap"]
    assert findings[0].message.startswith("layer 'tier0': 5 hot threads in 4 whole cores")


def test_compiled_and_profile_views_agree(example: Profile) -> None:
    shape = synthetic(8, 2)
    from_profile = views_from_profile(example, shape)
    from_specs = views_from_config(compile_profile(example, shape).config, shape)
    assert [(v.name, v.kind, v.blocks, v.exclusive, v.fixed_cores) for v in from_profile] == [
        (v.name, v.kind, v.blocks, v.exclusive, v.fixed_cores) for v in from_specs]


def test_lint_reads_a_real_capture(tmp_path) -> None:
    """A capture written by observe's real writer and finalize.sql, with SMT siblings 0-1."""
    from threadwise.observe.builder import CaptureBuilder
    from threadwise.synthesize.lint_capture import capture_facts

    ms = 1_000_000
    names = {10: "svc", 11: "hot-0", 12: "hot-1", 13: "compactor"}
    cap = CaptureBuilder(start_ts=0, duration_ns=1000 * ms, nr_cpus=2, threads_per_core=2,
                         target_tgids=[10])
    cap.events("raw_sched_switch", [(1 * ms, 0, 0, 0, 120, 11, 120), (600 * ms, 0, 11, 1, 120, 13, 120),
                                    (1 * ms, 1, 0, 0, 120, 12, 120)])
    cap.events("raw_task_seen", [(1, tid, 10, name) for tid, name in names.items()])
    for tid, name in names.items():
        cap.snapshot(1, "start", tid, 10, name)
    path = cap.write(tmp_path / "c.duckdb")
    facts = capture_facts(path)
    name = {t.utid: t.name for t in facts.threads}
    assert {(name[a], name[b]): ns for (a, b), ns in facts.corun.items()} == {   # cpus 0, 1: siblings
        ("hot-0", "hot-1"): 599 * ms, ("hot-1", "compactor"): 400 * ms}
    p = Profile(schema_version=1, name="t", workload=Workload(process="proc"),
                group=[hot_group(2, ["hot-0", "hot-1"])])
    shape = synthetic(4, 2)
    findings = lint(views_from_profile(p, shape), shape, facts)
    assert [(f.lint, f.threads) for f in findings] == [
        ("smt_collision", ("hot-0", "hot-1")), ("uncovered", ("compactor",))]
    assert findings[0].message.startswith("observed: hot-0 and hot-1 ran on sibling CPUs of one "
                                          "core at the same time for 599.0 ms (59.9% of the capture")


@pytest.mark.parametrize("specs, message", [
    ([{"name": "a", "matches": [[{"CommPrefx": "a"}]], "kind": {"Open": {}}}],
     "unknown scx_layered matcher 'CommPrefx'"),
    ([{"name": "a", "matches": [[{"CommPrefix": "a", "NiceAbove": 0}]], "kind": {"Open": {}}}],
     "bad scx_layered match"),
    ([{"name": "a", "matches": [[]], "kind": {"Opened": {}}}], "layer 'a': unknown kind 'Opened'"),
])
def test_bad_layer_configs_are_input_errors(specs, message) -> None:
    with pytest.raises(InputError, match=message):
        LayerConfig.from_json_data(specs)


def test_lint_and_analyze_count_the_same_hot_threads(tmp_path) -> None:
    """hot-1 gets only 30% of a CPU (another process takes the rest) but is runnable all the
    time: analyze counts it hot (demand), and so must `lint --capture`. Lint used to count only
    threads with half a CPU, so it saw one hot thread where synthesize sized for two."""
    from threadwise.analyze import analyze_capture
    from threadwise.analyze.contract import HOT_SHARE
    from threadwise.observe.builder import CaptureBuilder
    from threadwise.synthesize.lint_capture import capture_facts

    ms, t0 = 1_000_000, 1_000_000_000
    cap = CaptureBuilder(target_tgids=[10])
    for tid, tgid, name in ((10, 10, "svc"), (11, 10, "hot-0"), (12, 10, "hot-1"), (20, 20, "noise")):
        cap.thread(tid, tgid, name)
    for k in range(100):
        cap.slice(11, 0, t0 + k * 10 * ms, 10 * ms, "R+")            # hot-0 owns cpu 0
        cap.slice(20, 1, t0 + k * 10 * ms, 7 * ms, "R+")             # noise preempts hot-1 ...
        cap.slice(12, 1, t0 + k * 10 * ms + 7 * ms, 3 * ms, "R+")    # ... which waits, runnable
    path = cap.write(tmp_path / "starved.duckdb")

    [group] = analyze_capture(path).groups.filter(pl.col("pattern") == "hot-*").to_dicts()
    facts = capture_facts(path)
    starved = next(t for t in facts.threads if t.name == "hot-1")
    assert starved.cpu_share < HOT_SHARE and starved.demand > 0.9   # the case the two rules split on
    assert group["hot_threads"] == 2
    assert sorted(t.name for t in facts.threads if t.hot) == ["hot-0", "hot-1"]
    p = profile(hot_group(2, ["hot-0", "hot-1"], request_millicores=1000))
    p = p.model_copy(update={"workload": Workload(process="svc")})
    [finding] = run(p, synthetic(4, 2), facts)
    assert (finding.lint, finding.threads) == ("smt_collision", ("hot-0", "hot-1"))
