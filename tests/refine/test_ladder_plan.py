"""The ladder's plan, the agent's raw-file parsers, validity rules and membership (fast tier)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from threadwise.errors import UsageError
from threadwise.refine.measure.ladder import plan_cells
from threadwise.refine.measure.plan import DEFAULT_ORDER
from threadwise.refine.measure.validity import (
    SPINNER_ALIVE_CPUS,
    CellRaw,
    read_cell,
    reasons,
    spinner_floor_s,
    spinners_runnable_s,
    stat_cpu_s,
    times_children_s,
)
from threadwise.runtime.membership import expected_layer, parse_map_dump
from threadwise.synthesize.layered import LayerConfig

SPECS = LayerConfig.from_json_data([
    {"name": "hot", "matches": [[{"PcommPrefix": "rolesim"}, {"CommPrefix": "hot-"}]],
     "kind": {"Confined": {"cpus_range": [1, 1], "exclusive": True}}},
    {"name": "split", "matches": [[{"PcommPrefix": "rolesim"}, {"CommPrefix": "worker-"},
                                   {"AvgRuntime": [0, 1000]}]], "kind": {"Open": {}}},
    {"name": "rolesim", "matches": [[{"PcommPrefix": "rolesim"}]], "kind": {"Open": {}}},
    {"name": "rest", "matches": [[]], "kind": {"Open": {}}},
])


def test_abba_reverses_the_arm_order_every_repeat_and_runs_levels_ascending():
    turns = plan_cells(["baseline", "p"], [4, 0, 2], 3, "abba", seed=1)
    assert [arm for arm, _ in turns] == ["baseline", "p", "p", "baseline", "baseline", "p"]
    levels = [[c.level for c in cells] for _, cells in turns]
    assert levels == [[0, 2, 4]] * 6
    indices = [c.idx for _, cells in turns for c in cells]
    assert indices == list(range(18))
    assert {c.repeat for _, cells in turns[2:4] for c in cells} == {2}


@pytest.mark.parametrize(("arms", "repeats"), [
    (["baseline", "baseline-aa", "best", "candidate"], 8),   # a train step's ladder at its default
    (["baseline", "baseline-aa", "exclusive"], 3),           # lab_busy's A/A ladder
    (["baseline", "p"], 4)])
def test_rotate_gives_each_arm_each_position_equally_often(arms: list[str], repeats: int) -> None:
    # issue 35 item 5: with a fixed order the candidate always ran between the baseline and the
    # best, so arm and position (and time since the attach) were one; rotate is the default
    assert DEFAULT_ORDER == "rotate"
    turns = plan_cells(arms, [0, 2], repeats, DEFAULT_ORDER, seed=1)
    positions: dict[str, list[int]] = {arm: [] for arm in arms}
    for index, (arm, cells) in enumerate(turns):
        positions[arm].append(index % len(arms))
        assert {c.repeat for c in cells} == {index // len(arms) + 1}
    each = repeats // len(arms)
    for arm, seen in positions.items():
        counts = Counter(seen)
        if repeats % len(arms) == 0:
            assert counts == {position: each for position in range(len(arms))}, arm
        else:   # fewer repeats than a full cycle: no position twice before every arm had it once
            assert max(counts.values()) - min(counts.get(p, 0) for p in range(len(arms))) <= 1, arm


def test_an_arm_with_fewer_repeats_runs_its_first_ones_and_still_takes_each_position_once() -> None:
    # a training's step 0: the null arm at half of 8 repeats (step_ladders.null_repeats)
    arms = ["baseline", "baseline-aa", "null", "start"]
    turns = plan_cells(arms, [0, 1], 8, DEFAULT_ORDER, seed=1, fewer={"null": 4})
    cells = [c for _, cs in turns for c in cs]
    assert [c.idx for c in cells] == list(range(len(cells))) == list(range(2 * (3 * 8 + 4)))
    assert sorted({c.repeat for c in cells if c.arm == "null"}) == [1, 2, 3, 4]
    assert all(sorted(c.repeat for c in cells if c.arm == arm) == sorted(list(range(1, 9)) * 2)
               for arm in ("baseline", "baseline-aa", "start"))
    # in repeats 1-4 every arm runs, each in another place of the rotation
    first = [[arm for arm, cs in turns if cs[0].repeat == r] for r in range(1, 5)]
    assert sorted(order.index("null") for order in first) == [0, 1, 2, 3]
    # the others keep their rotation afterwards, without the null arm's turn
    assert [arm for arm, cs in turns if cs[0].repeat == 5] == ["baseline", "baseline-aa", "start"]


@pytest.mark.parametrize("fewer", [{"other": 2}, {"null": 0}, {"null": 9}])
def test_fewer_repeats_for_an_arm_not_planned_or_out_of_range_are_refused(fewer) -> None:
    with pytest.raises(UsageError, match="per-arm repeats"):
        plan_cells(["baseline", "null"], [0], 8, DEFAULT_ORDER, seed=1, fewer=fewer)


def test_shuffle_is_seeded_and_covers_every_arm_each_repeat():
    one = plan_cells(["a", "b", "c"], [0], 4, "shuffle", seed=7)
    two = plan_cells(["a", "b", "c"], [0], 4, "shuffle", seed=7)
    other = plan_cells(["a", "b", "c"], [0], 4, "shuffle", seed=8)
    assert one == two
    assert [arm for arm, _ in one] != [arm for arm, _ in other]
    for repeat in range(4):
        assert sorted(arm for arm, _ in one[repeat * 3:(repeat + 1) * 3]) == ["a", "b", "c"]


@pytest.mark.parametrize(("arms", "levels", "repeats", "order"), [
    (["a", "a"], [0], 1, "abba"), (["a"], [], 1, "abba"), (["a"], [-1], 1, "abba"),
    (["a"], [0], 0, "abba"), (["a"], [0], 1, "random")])
def test_bad_plans_are_refused(arms, levels, repeats, order):
    with pytest.raises(UsageError):
        plan_cells(arms, levels, repeats, order, seed=1)


def test_times_output_of_dash_and_busybox():
    assert times_children_s("0m0.004000s 0m0.000000s\n1m2.500000s 0m0.250000s\n") == pytest.approx(62.75)
    assert times_children_s("0m0.00s 0m0.00s\n0m3.21s 0m0.09s") == pytest.approx(3.30)


def _cell_dir(tmp_path: Path, times: dict[str, str]) -> Path:
    """A finished cell's raw directory as agent.sh writes it, with the given `times` files."""
    (tmp_path / "cell").write_text("10 redis 2 1\n")
    (tmp_path / "done").write_text("ok\n")
    (tmp_path / "wall").write_text("100.0 105.5\n")
    for tag, text in times.items():
        (tmp_path / f"times.{tag}").write_text(text)
    return tmp_path


# busybox ash's `times` of a lab cell (run 1 of 2026-11-25, cell 10, Redis at bg=2): the generator
# (3.9 s of CPU) exited while a starved membership probe ran, so this shell reaped it between the
# two stamps around the probe.
_BEFORE = "0m0.080s 0m0.580s\n0m53.980s 0m21.450s\n"
_AFTER = "0m0.080s 0m0.590s\n0m54.630s 0m24.840s\n"


def test_the_generator_keeps_its_cpu_when_it_is_reaped_during_the_membership_probe(tmp_path: Path):
    # the probe's subshell reports its own CPU: 0.01 s itself, 0.03 s its bpftool and /proc scan
    raw = read_cell(_cell_dir(tmp_path, {"before": _BEFORE, "after": _AFTER,
                                         "probe": "0m0.000s 0m0.010s\n0m0.020s 0m0.010s\n"}),
                    source="command")
    assert raw.generator_cpu_s == pytest.approx(0.65 + 3.39 - 0.04)


def test_old_raw_cells_subtract_the_child_times_around_the_probe(tmp_path: Path):
    # before times.probe: the change around the probe, which swallowed that generator (0.01 s)
    raw = read_cell(_cell_dir(tmp_path, {"before": _BEFORE, "mid0": _BEFORE,
                                         "mid1": "0m0.080s 0m0.590s\n0m54.630s 0m24.830s\n",
                                         "after": _AFTER}), source="command")
    assert raw.generator_cpu_s == pytest.approx(0.01)


def test_a_cell_without_a_probe_counts_every_reaped_child_as_the_generator(tmp_path: Path):
    raw = read_cell(_cell_dir(tmp_path, {"before": _BEFORE, "after": _AFTER}), source="command")
    assert raw.generator_cpu_s == pytest.approx(4.04)
    assert read_cell(tmp_path, source="service").generator_cpu_s is None


def test_stat_cpu_reads_utime_and_stime_after_a_comm_with_spaces():
    before = "123 (tw spin) S 1 1 1 0 -1 4194304 0 0 0 0 100 20 0 0 20 0 3 0 1 1 1"
    after = "123 (tw spin) S 1 1 1 0 -1 4194304 0 0 0 0 350 70 0 0 20 0 3 0 1 1 1"
    assert stat_cpu_s(before, after, 100) == pytest.approx(3.0)


def _raw(**changes) -> CellRaw:
    base = dict(idx=0, arm="p", level=2, repeat=1, done=True, wall_s=5.0, spinner_cpu_s=9.6,
                generator_cpu_s=1.0, state_before="enabled layered_1.1.4",
                state_after="enabled layered_1.1.4",
                alive_before="1", alive_after="1", load_rc=0, members=5)
    base.update(changes)
    return CellRaw(**base)


def test_a_clean_profile_cell_is_valid():
    assert reasons(_raw(), baseline=False, vcpus=2, window_s=5.0, metrics_error=None) == []


@pytest.mark.parametrize(("changes", "baseline", "word"), [
    ({"spinner_cpu_s": 1.2, "state_before": "disabled", "state_after": "disabled"}, True, "spinners"),
    ({"spinner_cpu_s": 0.05}, False, "spinners"),
    ({"spinner_cpu_s": None}, False, "spinners"),
    ({"generator_cpu_s": 4.8}, False, "generator"),
    ({"alive_after": "0"}, False, "service"),
    ({"state_after": "disabled -"}, False, "attach"),
    ({}, True, "attach"),
    ({"mismatched": ["hot-0 (tid 9): expected hot, in rest"]}, False, "membership"),
    ({"membership_error": "no tid->layer map"}, False, "membership"),
    ({"load_rc": 1}, False, "load"),
    ({"load_rc": 143}, False, "load: the load generator did not finish"),
    ({"done": False}, False, "cut"),
])
def test_each_broken_promise_makes_the_cell_invalid(changes, baseline, word):
    found = reasons(_raw(**changes), baseline=baseline, vcpus=2, window_s=5.0, metrics_error=None)
    assert found and found[0].startswith(word), found


def test_a_metrics_error_is_a_reason_and_level_zero_needs_no_spinners():
    found = reasons(_raw(level=0, spinner_cpu_s=0.0), baseline=False, vcpus=2, window_s=5.0,
                    metrics_error="no metric get_rps in the output")
    assert found == ["load: no metric get_rps in the output"]


def test_bpftool_dump_formats():
    with_btf = json.dumps([{"key": [60, 0], "value": [2, 0], "formatted": {"key": 60, "value": 2}}])
    raw = json.dumps([{"key": ["0x3c", "0x00", "0x00", "0x00"], "value": ["0x01", "0x00", "0x00", "0x00"]}])
    assert parse_map_dump(with_btf) == {60: 2}
    assert parse_map_dump(raw) == {60: 1}
    assert parse_map_dump("") == {}


def test_expected_layer_is_the_first_match_and_unknown_for_behaviour_matchers():
    assert expected_layer(SPECS, "hot-0", "rolesim") == "hot"
    assert expected_layer(SPECS, "worker-1", "rolesim") is None  # AvgRuntime decides, not the name
    assert expected_layer(SPECS, "feeder", "rolesim") == "rolesim"
    assert expected_layer(SPECS, "hot-0", "other") == "rest"


def test_the_spinner_floor_is_a_quarter_of_the_cpus_a_background_can_take():
    assert spinner_floor_s(2, 2, 5.0) == pytest.approx(1.25)  # 2 spinners, 1 CPU left to them
    assert spinner_floor_s(8, 2, 5.0) == pytest.approx(1.25)
    assert spinner_floor_s(1, 8, 5.0) == pytest.approx(1.25)
    assert spinner_floor_s(8, 8, 5.0) == pytest.approx(8.75)
    assert spinner_floor_s(2, 2, 5.0, duty=0.5) == pytest.approx(0.625)  # --spiky: busy half the time
    ok = reasons(_raw(spinner_cpu_s=1.3), baseline=False, vcpus=2, window_s=5.0, metrics_error=None)
    assert ok == []


# --- the background rule: baseline cells need a quarter of the CPUs, profile cells only a live one ---

WALL_S = 5.0
STARVED_S = 0.23 * WALL_S  # 0.23 CPU: scx_layered's exclusive CPU starved two spinners (LAB.md)


def _baseline_raw(**changes: object) -> CellRaw:
    return _raw(state_before="disabled", state_after="disabled", **changes)


def test_spinners_the_profile_starved_are_a_valid_profile_cell() -> None:
    assert spinner_floor_s(2, 2, WALL_S) > STARVED_S  # more than the profile left the spinners
    found = reasons(_raw(level=2, spinner_cpu_s=STARVED_S), baseline=False, vcpus=2,
                    window_s=WALL_S, metrics_error=None)
    assert found == []
    # the same reading in a baseline cell: the default scheduler ran a background too weak to count
    baseline = reasons(_baseline_raw(level=2, spinner_cpu_s=STARVED_S), baseline=True, vcpus=2,
                       window_s=WALL_S, metrics_error=None)
    assert len(baseline) == 1 and baseline[0].startswith("spinners: 2 spinners burned 1.15 s"), baseline
    assert "need >= 1.25 s" in baseline[0]


@pytest.mark.parametrize("spinner_cpu_s", [None, 0.0, 0.09])
def test_a_background_that_never_ran_is_an_invalid_profile_cell(spinner_cpu_s: float | None) -> None:
    found = reasons(_raw(level=2, spinner_cpu_s=spinner_cpu_s), baseline=False, vcpus=2,
                    window_s=WALL_S, metrics_error=None)
    assert len(found) == 1 and found[0].startswith("spinners:"), found
    assert found[0].endswith(f"(need >= {SPINNER_ALIVE_CPUS * WALL_S:.2f} s: the background never ran)")
    assert ("no reading" in found[0]) == (spinner_cpu_s is None)


def test_spinners_starved_while_runnable_are_a_valid_profile_cell_and_never_a_baseline_one() -> None:
    """A profile that gives its threads the CPU can leave the spinners almost none (Redis: 0.05 s in
    8-9 s); their schedstat says they waited runnable the whole window, so the background was there
    and its starvation is the profile's result. Runnable for less than half of level x window, or a
    baseline cell: the CPU rules stand."""
    starved = _raw(level=2, spinner_cpu_s=0.05, spinner_runnable_s=2 * WALL_S * 0.98)
    assert reasons(starved, baseline=False, vcpus=2, window_s=WALL_S, metrics_error=None) == []
    idle = _raw(level=2, spinner_cpu_s=0.05, spinner_runnable_s=2 * WALL_S * 0.4)
    assert reasons(idle, baseline=False, vcpus=2, window_s=WALL_S, metrics_error=None)[0].endswith(
        "the background never ran)")
    in_baseline = _baseline_raw(level=2, spinner_cpu_s=0.05, spinner_runnable_s=2 * WALL_S)
    assert reasons(in_baseline, baseline=True, vcpus=2, window_s=WALL_S,
                   metrics_error=None)[0].startswith("spinners:")


def test_spinner_threads_runnable_at_both_ends_count_the_whole_window() -> None:
    """A spinner starved all window has no schedstat growth (its wait is added when it next runs):
    state R at both ends counts the window; other threads count their ran + waited growth; the
    process's sleeping main thread and a thread missing at one end count nothing."""
    before = "100 S 7329200 1216641\n101 R 98616286 574581890\n102 R 301100855 686845840\n103 R 1 1\n"
    after = "100 S 7329200 1216641\n101 R 135757538 9585710193\n102 R 301100855 686845840\n104 R 5 5\n"
    assert spinners_runnable_s(before, after, 8.7) == pytest.approx(8.7 + 8.7)
    sleeping = "101 S 1000000000 0\n"
    assert spinners_runnable_s("101 R 0 0\n", sleeping, 8.7) == pytest.approx(1.0)


def test_the_alive_threshold_scales_with_the_cells_wall_time() -> None:
    alive = SPINNER_ALIVE_CPUS * 10.0
    assert reasons(_raw(wall_s=10.0, spinner_cpu_s=alive * 1.1), baseline=False, vcpus=2,
                   window_s=WALL_S, metrics_error=None) == []
    assert reasons(_raw(wall_s=10.0, spinner_cpu_s=alive * 0.9), baseline=False, vcpus=2,
                   window_s=WALL_S, metrics_error=None)[0].startswith("spinners:")
    # no wall reading: the configured window stands in for it
    assert reasons(_raw(wall_s=None, spinner_cpu_s=SPINNER_ALIVE_CPUS * WALL_S * 0.9), baseline=False,
                   vcpus=2, window_s=WALL_S, metrics_error=None)[0].startswith("spinners:")


@pytest.mark.parametrize(("level", "vcpus", "floor_s"), [(2, 2, 1.25), (8, 2, 1.25), (8, 4, 3.75),
                                                         (2, 8, 2.5)])
def test_a_baseline_cell_below_the_quarter_floor_is_invalid(level: int, vcpus: int, floor_s: float) -> None:
    assert spinner_floor_s(level, vcpus, WALL_S) == pytest.approx(floor_s)
    below = reasons(_baseline_raw(level=level, spinner_cpu_s=floor_s * 0.95), baseline=True,
                    vcpus=vcpus, window_s=WALL_S, metrics_error=None)
    assert len(below) == 1 and below[0].startswith(f"spinners: {level} spinners burned"), below
    assert "never ran" not in below[0]
    above = reasons(_baseline_raw(level=level, spinner_cpu_s=floor_s * 1.05), baseline=True,
                    vcpus=vcpus, window_s=WALL_S, metrics_error=None)
    assert above == []


@pytest.mark.parametrize("baseline", [False, True])
def test_level_zero_needs_no_spinners_in_either_kind_of_cell(baseline: bool) -> None:
    raw = _baseline_raw(level=0, spinner_cpu_s=None) if baseline else _raw(level=0, spinner_cpu_s=None)
    assert reasons(raw, baseline=baseline, vcpus=2, window_s=WALL_S, metrics_error=None) == []


def test_procstat_busy_counts_everything_but_idle_and_iowait():
    from threadwise.refine.measure.validity import procstat_busy_s

    before = "cpu  100 0 50 1000 10 0 5 0 0 0\ncpu0 50 0 25 500 5 0 2 0 0 0"
    after = "cpu  250 0 100 1100 30 0 15 0 0 0\ncpu0 120 0 50 560 10 0 7 0 0 0"
    assert procstat_busy_s(before, after, 100) == pytest.approx((150 + 50 + 10) / 100)


def test_a_busy_load_command_that_is_the_workload_is_not_a_saturated_generator() -> None:
    """Without a service the load command is what is measured (docs/workload.md): a CPU-bound
    tool at 96% of a CPU is the workload working, not a generator that limited a service."""
    busy = _raw(generator_cpu_s=4.8)
    assert reasons(busy, baseline=False, vcpus=2, window_s=5.0, metrics_error=None)[0].startswith("generator")
    assert reasons(busy, baseline=False, vcpus=2, window_s=5.0, metrics_error=None, load_is_target=True) == []


def test_a_thread_absent_from_the_map_is_a_fault_only_if_it_ran_since_the_attach(tmp_path: Path):
    """hot-0 ran and is not in the map: a mismatch. The process's main thread has not run since the
    attach's re-match (idle.txt) and is not in the map either: placed nowhere yet, no fault."""
    from threadwise.refine.measure.ingest import _membership
    from threadwise.refine.measure.validity import CellRaw

    (tmp_path / "threads.txt").write_text("10 10 rolesim\n10 11 hot-0\n10 12 housekeep\n")
    dump = [{"key": [], "value": [], "formatted": {"key": 12, "value": 2}}]
    (tmp_path / "membership.json").write_text(json.dumps(dump))
    (tmp_path / "idle.txt").write_text("10\n")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    rows = _membership(raw, tmp_path, SPECS, run_id=1, idx=3)
    assert {(r.comm, r.expected_layer, r.actual_layer) for r in rows} == {
        ("rolesim", "rolesim", None), ("hot-0", "hot", None), ("housekeep", "rolesim", "rolesim")}
    assert raw.mismatched == ["hot-0 (tid 11): expected hot, in none"]
    assert raw.members == 3


def test_the_task_state_read_is_preferred_to_the_debug_map(tmp_path: Path):
    """layers.txt (threadwise-layer-of, scx_layered's task state) decides where a thread is; the
    debug map beside it lost hot-0's entry (a burst), which must not read as a fault."""
    from threadwise.refine.measure.ingest import _membership
    from threadwise.refine.measure.validity import CellRaw

    (tmp_path / "threads.txt").write_text("10 10 rolesim\n10 11 hot-0\n10 12 housekeep\n")
    (tmp_path / "membership.json").write_text(json.dumps([{"formatted": {"key": 12, "value": 2}}]))
    (tmp_path / "layers.txt").write_text("10 16 1\n11 0 0\n12 2 0\n")
    (tmp_path / "idle.txt").write_text("10\n")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    rows = _membership(raw, tmp_path, SPECS, run_id=1, idx=3)
    assert {(r.comm, r.actual_layer) for r in rows} == {("rolesim", None), ("hot-0", "hot"),
                                                         ("housekeep", "rolesim")}
    assert raw.mismatched == [] and raw.membership_error is None


def test_an_empty_task_state_read_falls_back_to_the_map_and_none_is_an_error(tmp_path: Path):
    from threadwise.refine.measure.ingest import _membership
    from threadwise.refine.measure.validity import CellRaw

    (tmp_path / "threads.txt").write_text("10 11 hot-0\n")
    (tmp_path / "layers.txt").write_text("")
    (tmp_path / "layers.err").write_text("layer-of: no scx_layered task map (task_ctxs) is loaded\n")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    assert _membership(raw, tmp_path, SPECS, run_id=1, idx=3) == []
    assert raw.membership_error is not None and "task map" in raw.membership_error
    (tmp_path / "membership.json").write_text(json.dumps([{"formatted": {"key": 11, "value": 0}}]))
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    assert [r.actual_layer for r in _membership(raw, tmp_path, SPECS, run_id=1, idx=3)] == ["hot"]


def test_a_thread_gone_before_its_placement_was_read_is_left_out(tmp_path: Path):
    """A load command that is the workload ends with its window; a thread listed by the probe may
    be gone when threadwise-layer-of reads it ("TID - gone"): no verdict on it, no fault. One
    that lives without a task context ("TID - nocontext") is a fault that says so; a cell whose
    listed threads all ended says that, not "none found"."""
    from threadwise.refine.measure.ingest import _membership
    from threadwise.refine.measure.validity import CellRaw

    (tmp_path / "threads.txt").write_text("10 10 rolesim\n10 11 hot-0\n")
    (tmp_path / "layers.txt").write_text("10 2 0\n11 - gone\n")
    (tmp_path / "idle.txt").write_text("")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    rows = _membership(raw, tmp_path, SPECS, run_id=1, idx=3)
    assert [(r.comm, r.actual_layer) for r in rows] == [("rolesim", "rolesim")]
    assert raw.mismatched == [] and raw.membership_error is None

    (tmp_path / "layers.txt").write_text("10 2 0\n11 - nocontext\n")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    _membership(raw, tmp_path, SPECS, run_id=1, idx=3)
    assert raw.mismatched == ["hot-0 (tid 11): expected hot, in none (layer-of: nocontext)"]

    (tmp_path / "layers.txt").write_text("10 - gone\n11 - gone\n")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    assert _membership(raw, tmp_path, SPECS, run_id=1, idx=3) == []
    assert raw.membership_error == "all 2 target threads ended before the probe read their layers"
    (tmp_path / "probe.at").write_text("36.0 37.9 38.4\n")
    (tmp_path / "wall").write_text("36.1 38.3\n")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    _membership(raw, tmp_path, SPECS, run_id=1, idx=3)
    assert raw.membership_error.endswith("(read 2.3 s into a 2.2-s window)"), raw.membership_error


def test_a_pending_rematch_counts_only_for_a_running_thread(tmp_path: Path):
    """An exec'd leader matched under its fork-time name, asleep at the probe with its re-match
    pending, is taken as it wakes: no fault. The same pending re-match on a running thread (a
    renamed spinner) is one."""
    from threadwise.refine.measure.ingest import _membership
    from threadwise.refine.measure.validity import CellRaw

    (tmp_path / "threads.txt").write_text("10 10 rolesim\n10 11 hot-0\n10 12 hot-1\n")
    (tmp_path / "layers.txt").write_text("10 2 0\n11 2 1\n12 2 1\n")
    (tmp_path / "states.txt").write_text("10 S\n11 S\n12 R\n")
    (tmp_path / "idle.txt").write_text("")
    raw = CellRaw(idx=3, arm="p", level=0, repeat=1, done=True)
    _membership(raw, tmp_path, SPECS, run_id=1, idx=3)
    assert raw.mismatched == ["hot-1 (tid 12): expected hot, in rolesim"]
