"""Who blocked whom (refine/measure/blockers.py): the overlap arithmetic on hand-made tracer records, the
trace-cell plan, the agent lines it renders, the ladder rows and REPORT.md's lines.

The records are written in the libbpf tracer's own binary layouts (observe/records.py), so the
capture is built by the same path a lab trace cell takes: observe's reader, ingest and finalize.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import datafiles
from threadwise.errors import UsageError
from threadwise.observe.records import SWITCH, TASK, TW_SEEN, TW_SWITCH, TW_WAKING, WAKING
from threadwise.refine.measure import blockers, ladder, store
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.workload import parse_workload
from threadwise.synthesize.layered import LayerConfig

S, R_PLUS = 1, 256
WORKER, HOT, FEEDER, SPIN, ROLESIM = 20, 21, 22, 30, 10

PROFILE = datafiles.text("refine/blockers-profile.toml")
SPECS = [{"name": name, "matches": [[{"PcommPrefix": "rolesim"}, {"CommPrefix": prefix}]],
          "kind": {"Confined": {"util_range": [0.8, 0.9]}}}
         for name, prefix in (("hot", "hot-"), ("worker", "worker-"), ("feeder", "feeder"))]
SPECS.append({"name": "rest", "matches": [[]], "kind": {"Open": {}}})
CONFIG = LayerConfig.from_json_data(SPECS)

WORKLOAD = datafiles.text("refine/blockers-workload.toml")


def _switches() -> list[tuple[int, int, int, int, int]]:
    """(ts, cpu, prev_tid, prev_state, next_tid): the two CPUs of the scenario.

    cpu0: worker sleeps at 1000 -> spin; woken at 2000, waits behind spin until 5000; sleeps at
          6000, woken at 7000, waits behind spin until 9000; sleeps at 9500 (idle); woken at 10000,
          runs at 10400 on the idle CPU; sleeps at 10600; woken at 11000 (on cpu1's behalf), cpu0
          idle until 11500, then spin until the worker runs at 12000.
    cpu1: feeder sleeps at 1000 -> hot-0; woken at 3000, waits behind hot-0 until 4000; sleeps at
          4500; woken at 5500, runs at 6000; preempted by hot-0 at 6500 (R+) until 7500.
    """
    return [
        (1000, 0, WORKER, S, SPIN), (5000, 0, SPIN, R_PLUS, WORKER), (6000, 0, WORKER, S, SPIN),
        (9000, 0, SPIN, R_PLUS, WORKER), (9500, 0, WORKER, S, 0), (10400, 0, 0, 0, WORKER),
        (10600, 0, WORKER, S, 0), (11500, 0, 0, 0, SPIN), (12000, 0, SPIN, R_PLUS, WORKER),
        (1000, 1, FEEDER, S, HOT), (4000, 1, HOT, R_PLUS, FEEDER), (4500, 1, FEEDER, S, HOT),
        (6000, 1, HOT, R_PLUS, FEEDER), (6500, 1, FEEDER, R_PLUS, HOT), (7500, 1, HOT, R_PLUS, FEEDER),
        (8000, 1, FEEDER, S, HOT),
    ]


# (ts, cpu, waker_tid, wakee_tid, target_cpu)
WAKINGS = [(2000, 1, 0, WORKER, 0), (3000, 0, 0, FEEDER, 1), (5500, 0, 0, FEEDER, 1),
           (7000, 1, FEEDER, WORKER, 0), (10000, 1, 0, WORKER, 0), (11000, 1, 0, WORKER, 1)]


def write_trace(trace: Path, *, end_ts: int = 13_000) -> None:
    """A trace directory as the agent leaves it: record files, control lines, /proc names."""
    trace.mkdir(parents=True)
    switches = [(TW_SWITCH, cpu, ts, state, prev, 120, nxt, 120) for ts, cpu, prev, state, nxt in _switches()]
    np.array(switches, dtype=SWITCH).tofile(trace / "switch.bin")
    wakings = [(TW_WAKING, cpu, ts, waker, wakee, target, 0, waker, 0 if waker else 2)
               for ts, cpu, waker, wakee, target in WAKINGS]
    np.array(wakings, dtype=WAKING).tofile(trace / "waking.bin")
    # the tracer names a task at its first switch-out; hot-0 is named only by /proc below
    seen = [(TW_SEEN, 0, 1000, WORKER, ROLESIM, 0, 0, 0, b"worker-0", b""),
            (TW_SEEN, 1, 1000, FEEDER, ROLESIM, 0, 0, 0, b"feeder", b""),
            (TW_SEEN, 0, 5000, SPIN, SPIN, 0, 0, 0, b"tw-spin-0", b"")]
    np.array(seen, dtype=TASK).tofile(trace / "task.bin")
    (trace / "migrate.bin").write_bytes(b"")
    counts = {"switch": {"seen": len(switches), "dropped": 0, "dropped_per_cpu": [0, 0]},
              "waking": {"seen": len(wakings), "dropped": 0, "dropped_per_cpu": [0, 0]},
              "written": {"switch.bin": len(switches), "waking.bin": len(wakings), "migrate.bin": 0,
                          "task.bin": len(seen)},
              "missed": {"on_switch": 0, "on_waking": 0}, "bad_records": 0}
    (trace / "control").write_text(f"live 0 2 2097152\nend {end_ts}\ncounts {json.dumps(counts)}\n")
    # bpftool -j prog show at stop: the tracer's programs are the ones its counts name
    (trace / "progs.json").write_text(json.dumps([
        {"name": "on_switch", "run_time_ns": 3000, "run_cnt": 2000},
        {"name": "layered_enqueue", "run_time_ns": 999_999, "run_cnt": 5},
        {"name": "on_waking", "run_time_ns": 1000, "run_cnt": 160}]))
    (trace / "threads").write_text(
        f"/proc/{ROLESIM}/task/{ROLESIM}/comm:rolesim\n/proc/{ROLESIM}/task/{HOT}/comm:hot-0\n"
        f"/proc/{ROLESIM}/task/{WORKER}/comm:worker-0\n/proc/{ROLESIM}/task/{FEEDER}/comm:feeder\n"
        f"/proc/{SPIN}/task/{SPIN}/comm:tw-spin-0\n")


def test_blockers_are_the_exact_overlap_of_each_wait_with_the_slices_of_the_cpu_it_ended_on(tmp_path):
    write_trace(tmp_path / "trace")
    capture = blockers.build_capture(tmp_path / "trace", tmp_path / "trace.duckdb", kernel="7.3.4")
    rows = blockers.capture_blockers(capture, CONFIG, PROFILE)
    assert [(r.waiter_group, r.blocker, r.blocker_group, r.cpu, r.wait_ns, r.waits) for r in rows] == [
        # three preemption/wakeup waits behind hot-0: 1000 + 500 + 1000 (the R+ wait counts too)
        ("feeder", "hot-0", "hot", 1, 2500, 3),
        # behind the spinner (the catch-all: no group): 3000 + 2000 + the last 500 of [11000, 12000)
        ("worker", "tw-spin-0", None, 0, 5500, 3),
        # on an idle CPU: 400 of [10000, 10400) and the first 500 of [11000, 12000), which ended
        # on cpu0 although the wakeup targeted cpu1: the CPU a wait is charged to is where it ran
        ("worker", "swapper", None, 0, 900, 2),
    ]


def test_guest_thread_names_come_from_the_proc_listing(tmp_path):
    (tmp_path / "threads").write_text("/proc/7/task/9/comm:a:b c\n/proc/x/task/1/comm:bad\n\n")
    assert blockers.guest_threads(tmp_path / "threads") == [(9, 7, "a:b c")]
    with pytest.raises(ValueError, match="never went live"):
        blockers.build_capture(tmp_path, tmp_path / "c.duckdb")


def _plan(levels: list[int], repeats: int = 2) -> ladder.Plan:
    profile = Arm("tiny", PROFILE, CONFIG)
    no_latency = Arm("flat", PROFILE.replace('"latency"', '"default"'), CONFIG)
    return ladder.make_plan(parse_workload(WORKLOAD), [Arm(BASELINE), profile, no_latency], levels=levels,
                            repeats=repeats, shape="cores=2,threads-per-core=1", workload_toml=WORKLOAD)


def test_trace_cells_per_profile_arm_with_latency_groups_at_the_end_of_its_first_turn(monkeypatch):
    plan = _plan([0, 1, 2])
    monkeypatch.delenv(blockers.TRACE_ENV, raising=False)
    traced = blockers.trace_cells(plan)
    # turns: repeat 1 baseline, tiny, flat; repeat 2 flat, tiny, baseline; only tiny has latency groups
    assert list(traced) == [1]
    # the lowest and the top level (a latency failure at bg=0 needs bg=0's rows)
    first = len(plan.cells)
    assert traced[1] == (ladder.Cell(first, "tiny", 0, 1), ladder.Cell(first + 1, "tiny", 2, 1))
    assert [(c.idx, c.level) for c in blockers.trace_cells(_plan([3]))[1]] == [(6, 3)]   # one level: one cell
    monkeypatch.setenv(blockers.TRACE_ENV, "all")
    assert [(c.idx, c.level) for c in blockers.trace_cells(plan)[1]] == [(18, 0), (19, 1), (20, 2)]
    monkeypatch.setenv(blockers.TRACE_ENV, "off")
    assert blockers.default_tracer("direct") is None
    monkeypatch.setenv(blockers.TRACE_ENV, "everything")
    with pytest.raises(UsageError, match="THREADWISE_LAB_TRACE"):
        blockers.policy()


def test_the_plan_runs_the_trace_cell_attached_after_the_turns_measured_cells(monkeypatch, tmp_path):
    monkeypatch.delenv(blockers.TRACE_ENV, raising=False)
    plan = _plan([0, 1], repeats=1)
    tracer = tmp_path / "threadwise-sched"
    script = ladder.plan_script(plan, attach_mode="direct", spin=Path("/x/spin"), scx=Path("/x/scx"),
                                tcp_probe="nc", tracer=tracer)
    steps = [line for line in script.splitlines() if line.split(" ")[0] in
             ("attach", "detach", "cell", "trace_cell")]
    assert steps[steps.index("attach tiny 100"):steps.index("detach tiny") + 1] == [
        "attach tiny 100", "cell 2 tiny 0 1", "cell 3 tiny 1 1", "trace_cell 6 tiny 0 1",
        "trace_cell 7 tiny 1 1", "detach tiny"]
    assert f"TRACER={tracer}" in script.splitlines()
    # without a tracer (the vng guest, a host, or none built) nothing is traced
    plain = ladder.plan_script(plan, attach_mode="runtime", spin=Path("/x/spin"), scx=None)
    assert "trace_cell" not in plain and "TRACER=" not in plain


def test_ingest_stores_every_row_and_the_report_shows_the_top_three_per_group(tmp_path, monkeypatch):
    monkeypatch.delenv(blockers.TRACE_ENV, raising=False)
    plan = _plan([0, 1], repeats=1)
    cell = blockers.trace_cells(plan)[1][-1]   # the top level's (bg=1); bg=0's never came back
    directory = tmp_path / "cells" / str(cell.idx)
    write_trace(directory / "trace")
    (directory / "cell").write_text(f"{cell.idx} {cell.arm} {cell.level} {cell.repeat}\n")
    (directory / "done").write_text("ok\n")
    con = store.open_ladder(tmp_path / "ladder.duckdb")
    try:
        rates = {directory: {"hot_chunks_per_s": 90.0}, tmp_path / "cells" / "3": {"hot_chunks_per_s": 100.0}}
        notes = blockers.ingest_traces(con, 1, plan, tmp_path, kernel="7.3.4",
                                       metrics=lambda d: rates.get(d, {}),
                                       denied=lambda d: 0.25 if d == directory else 0.5)
        assert notes == [f"trace cell {cell.idx} (tiny, bg=1): 3 blocker rows; 25 events in 0.0 s, 0 "
                         "dropped; tracer process ? CPU, its BPF programs 0.000 s in 2,160 runs (0.0 us "
                         "each); against the untraced cell: hot_chunks_per_s 0.9x (host denied 0.25 "
                         "traced, 0.50 untraced)"], notes
        stored = con.execute("SELECT idx, arm, level, waiter_group, blocker, blocker_group, cpu, wait_s, "
                             "waits FROM blocker ORDER BY waiter_group, wait_s DESC").fetchall()
        assert stored == [(cell.idx, "tiny", 1, "feeder", "hot-0", "hot", 1, 2.5e-6, 3),
                          (cell.idx, "tiny", 1, "worker", "tw-spin-0", None, 0, 5.5e-6, 3),
                          (cell.idx, "tiny", 1, "worker", "swapper", None, 0, 9e-7, 2)]
        section = blockers.report_section(con)
    finally:
        con.close()
    assert section[0] == "## Who blocked whom"
    assert f"- run 1, arm `tiny` at bg=1 (trace cell {cell.idx}):" in section
    assert ("  - feeder waited 0.0025 ms behind hot-0 [hot] on CPU 1 (3 waits; 100% of its 0.0025 ms)"
            in section)
    assert ("  - worker waited 0.0055 ms behind tw-spin-0 on CPU 0 (3 waits; 86% of its 0.0064 ms)"
            in section)
    assert any(line.startswith("  - worker waited 0.0009 ms on CPU 0 while it was idle") for line in section)


def test_an_unreadable_trace_is_a_note_not_a_failed_ingest(tmp_path, monkeypatch):
    monkeypatch.delenv(blockers.TRACE_ENV, raising=False)
    plan = _plan([0], repeats=1)
    cell = blockers.trace_cells(plan)[1][0]
    directory = tmp_path / "cells" / str(cell.idx)
    (directory / "trace").mkdir(parents=True)
    (directory / "trace" / "stderr").write_text("libbpf: failed to load\n")
    (directory / "cell").write_text(f"{cell.idx} tiny 0 1\n")
    con = store.open_ladder(tmp_path / "ladder.duckdb")
    try:
        notes = blockers.ingest_traces(con, 1, plan, tmp_path, kernel=None, metrics=lambda _d: {},
                                       denied=lambda _d: None)
        assert con.execute("SELECT count(*) FROM blocker").fetchone() == (0,)
        assert blockers.report_section(con) == []
    finally:
        con.close()
    assert len(notes) == 1 and "not read" in notes[0] and "failed to load" in notes[0]
