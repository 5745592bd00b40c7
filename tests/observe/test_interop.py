"""Export to Perfetto and import of Perfetto traces (fast tier: synthetic captures, no root).

The exported trace is parsed here with the perfetto package's own protos,
independently of threadwise's importer: every switch and waking must come
back with its timestamp, CPU and tids, names must round-trip. Then export ->
import must give back the raw tables row for row and the same analysis.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import duckdb
import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests import datafiles
from tests.synthetic.bulk import bulk_capture
from threadwise.cli import main
from threadwise.observe.builder import CaptureBuilder
from threadwise.observe.interop.export_perfetto import export_perfetto
from threadwise.observe.interop.import_trace import import_trace
from threadwise.observe.interop.trace_io import read_packets, write_packet
from threadwise.observe.store import open_capture

RAW_EVENT_TABLES = ("raw_sched_switch", "raw_sched_waking", "raw_sched_migrate", "raw_task_new",
                    "raw_task_exit", "raw_task_rename")
MS = 1_000_000


def synthetic_capture(path: Path) -> Path:
    """Two processes on 2 CPUs with what the compact encoding cannot say: a switch-chain gap,
    a waking from interrupt context, a waker that is not the running task, a wakeup_new, a
    thread born, renamed and exited inside the capture, a name with a space, lost events."""
    start = 1_000 * MS
    b = CaptureBuilder(start_ts=start, duration_ns=100 * MS, nr_cpus=2, target_tgids=[100], events_lost=5)
    b.thread(100, 100, "app")
    b.thread(101, 100, "hot-0")
    b.thread(102, 100, "worker one")
    b.thread(103, 100, "app", born_ts=start + 20 * MS, exit_ts=start + 80 * MS)
    b.thread(200, 200, "other")
    for i in range(40):
        b.slice(101, 0, start + i * 2 * MS, 2 * MS - 1000, "R+")      # hot-0 owns CPU 0
        b.slice(102, 1, start + i * 2 * MS, 200_000, "S")             # worker one wakes every 2 ms
        b.waking(start + i * 2 * MS - 5_000, 100 if i % 3 else 0, 102, cpu=1, target_cpu=1)
    for i in range(10):
        b.slice(103, 1, start + 25 * MS + i * 4 * MS + 500_000, 100_000, "S")
    b.slice(200, 1, start + 90 * MS + 500_000, 300_000, "D")
    b.waking(start + 21 * MS, 100, 103, cpu=0, target_cpu=1, is_new=True)
    b.waking(start + 30 * MS + 1_000, 200, 102, cpu=0, target_cpu=1)        # waker not running on CPU 0
    b.events("raw_task_rename", [(start + 21 * MS + 100, 1, 103, "app", "worker-2")])
    b.events("raw_sched_migrate", [(start + 50 * MS, 0, 103, 0, 1), (start + 51 * MS, 1, 102, 1, 1)])
    # a gap on CPU 1: 102 switches out although the chain says idle is running
    b.events("raw_sched_switch", [(start + 95 * MS, 1, 102, 1, 120, 0, 120)])
    return b.write(path)


def _raw(path: Path, table: str) -> list[tuple]:
    with open_capture(path) as con:
        return sorted(con.execute(f"SELECT * FROM {table}").fetchall())   # test-only ad hoc query


def parse_trace(path: Path) -> dict:
    """Decode a trace with the perfetto protos alone (not threadwise's importer)."""
    switches, wakings, names, processes, stats = [], [], {}, {}, {}
    lost_bundles = 0
    for raw in read_packets(path):
        packet = pb.TracePacket.FromString(raw)
        if packet.HasField("process_tree"):
            names.update({t.tid: t.name for t in packet.process_tree.threads})
            processes.update({p.pid: list(p.cmdline) for p in packet.process_tree.processes})
        if packet.HasField("ftrace_stats"):
            stats[packet.ftrace_stats.phase] = (packet.timestamp,
                                                sum(c.overrun for c in packet.ftrace_stats.cpu_stats))
        if not packet.HasField("ftrace_events"):
            continue
        bundle = packet.ftrace_events
        lost_bundles += bundle.lost_events
        compact = bundle.compact_sched
        ts = np.cumsum(np.array(compact.switch_timestamp, dtype=np.int64))
        switches += [(int(t), bundle.cpu, None, int(n))
                     for t, n in zip(ts, compact.switch_next_pid, strict=True)]
        ts = np.cumsum(np.array(compact.waking_timestamp, dtype=np.int64))
        wakings += [(int(t), bundle.cpu, int(p), int(c))
                    for t, p, c in zip(ts, compact.waking_pid, compact.waking_target_cpu, strict=True)]
        for event in bundle.event:
            if event.HasField("sched_switch"):
                switches.append((event.timestamp, bundle.cpu, event.sched_switch.prev_pid,
                                 event.sched_switch.next_pid))
            for kind in ("sched_waking", "sched_wakeup_new"):
                if event.HasField(kind):
                    body = getattr(event, kind)
                    wakings.append((event.timestamp, bundle.cpu, body.pid, body.target_cpu))
    return {"switches": switches, "wakings": wakings, "names": names, "processes": processes,
            "stats": stats, "lost_bundles": lost_bundles}


@pytest.fixture
def synthetic(tmp_path):
    return synthetic_capture(tmp_path / "synthetic.duckdb")


def test_every_switch_and_waking_comes_back_from_the_protos(synthetic, tmp_path):
    trace = tmp_path / "out.pftrace"
    result = export_perfetto(synthetic, trace)
    parsed = parse_trace(trace)
    switches = _raw(synthetic, "raw_sched_switch")
    assert sorted((t, c, n) for t, c, _p, n in parsed["switches"]) == \
        sorted((s[0], s[1], s[5]) for s in switches)
    full_prev = {(t, c): p for t, c, p, _n in parsed["switches"] if p is not None}
    assert all(full_prev.get((s[0], s[1]), s[2]) == s[2] for s in switches)
    wakings = _raw(synthetic, "raw_sched_waking")
    assert sorted(parsed["wakings"]) == sorted((w[0], w[1], w[3], w[4]) for w in wakings)
    # what compact leaves out was written in full: the first switch per CPU, the gap, odd wakers
    assert result.compact_switches < result.switches and result.compact_wakings < result.wakings
    assert parsed["lost_bundles"] >= 1            # the switch-chain gap
    with open_capture(synthetic) as con:
        threads = dict(con.execute("SELECT tid, name FROM thread WHERE utid <> 0").fetchall())
        start, end = con.execute("SELECT start_ts, end_ts FROM capture").fetchone()
    assert parsed["names"] == threads
    assert parsed["names"][102] == "worker one"
    assert parsed["processes"][100] == ["app"] and parsed["processes"][200] == ["other"]
    assert parsed["stats"] == {1: (start, 0), 2: (end, 5)}   # the tracer's loss; gaps are found again


def test_export_then_import_gives_back_the_raw_tables_and_the_analysis(synthetic, tmp_path):
    from threadwise.analyze import analyze_capture

    trace = tmp_path / "out.pftrace"
    export_perfetto(synthetic, trace)
    back = import_trace(trace, tmp_path / "back.duckdb", comm="app").path
    for table in RAW_EVENT_TABLES:
        assert _raw(back, table) == _raw(synthetic, table), table
    with open_capture(back) as con:
        row = con.execute("SELECT start_ts, end_ts, events_lost, switch_gaps, tracer_backend, end_reason, "
                          "target_tgids, notes FROM capture").fetchone()
    with open_capture(synthetic) as con:
        original = con.execute("SELECT start_ts, end_ts, events_lost, switch_gaps FROM capture").fetchone()
    assert row[:4] == original        # window, loss carried forward (5 + the same gap found again)
    assert row[4:7] == ("import:perfetto", "imported", [100])
    assert "imported from Perfetto trace" in row[7] and str(trace.resolve()) in row[7]
    columns = ["pattern", "role", "thread_count", "cpu_time_ns"]
    assert analyze_capture(back).groups.select(columns).rows() == \
        analyze_capture(synthetic).groups.select(columns).rows()


def test_import_by_pid_and_shape(synthetic, tmp_path):
    trace = tmp_path / "out.pftrace"
    export_perfetto(synthetic, trace)
    back = import_trace(trace, tmp_path / "back.duckdb", pid=100, shape="cores=1,threads-per-core=2").path
    with open_capture(back) as con:
        topology = con.execute("SELECT cpu, smt_siblings FROM cpu_topology ORDER BY cpu").fetchall()
        targets = con.execute("SELECT name FROM thread WHERE is_target ORDER BY name").fetchall()
    assert topology == [(0, [0, 1]), (1, [0, 1])]
    assert [name for (name,) in targets] == ["app", "app", "hot-0", "worker one"]


def test_export_streams_in_bounded_memory(tmp_path):
    """Python holds one batch and one bundle per CPU, never the trace: the peak of Python
    allocations stays flat while the trace is many times larger (the 10M-event RSS figure is
    in benchmarks/RESULTS.md)."""
    capture = bulk_capture(tmp_path / "bulk.duckdb", switches=600_000)
    trace = tmp_path / "bulk.pftrace"
    tracemalloc.start()
    try:
        result = export_perfetto(capture, trace, batch_rows=32_768, bundle_events=8_192)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.switches == 600_000 and result.wakings > 100_000
    assert trace.stat().st_size > 4_000_000
    assert peak < 40_000_000, f"peak Python allocations {peak / 1e6:.0f} MB"
    sizes = [len(raw) for raw in read_packets(trace)]
    assert max(sizes) < 2_000_000 and len(sizes) > 50


# --- bad input -------------------------------------------------------------------------------------

def _run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as done:   # typer ends a successful command with SystemExit(0)
        code = done.code or 0
    return code, capsys.readouterr().err


def test_export_refuses_to_overwrite_without_force(synthetic, tmp_path, capsys):
    trace = tmp_path / "out.pftrace"
    trace.write_bytes(b"keep me")
    code, err = _run(capsys, "export", str(synthetic), "-o", str(trace))
    assert code == 2 and "already exists" in err and "--force" in err and "Traceback" not in err
    assert trace.read_bytes() == b"keep me"
    assert _run(capsys, "export", str(synthetic), "-o", str(trace), "--force")[0] == 0
    assert trace.stat().st_size > 1000
    assert not list(tmp_path.glob(".out.pftrace.tmp-*"))


def test_export_rejects_unknown_format_and_missing_capture(synthetic, tmp_path, capsys):
    code, err = _run(capsys, "export", str(synthetic), "--format", "json", "-o", str(tmp_path / "x"))
    assert code == 2 and "error: unknown export format" in err and "hint:" in err
    code, err = _run(capsys, "export", str(tmp_path / "none.duckdb"), "-o", str(tmp_path / "x"))
    assert code == 2 and "not found" in err


NOT_TRACES = [b"", b"hello, this is text\n", b"\x0a" + b"\xff" * 9 + b"\x7f", b"\x0a\x05ab"]


@pytest.mark.parametrize("content", NOT_TRACES)
def test_import_refuses_what_is_not_a_trace(tmp_path, capsys, content):
    bad = tmp_path / "bad.trace"
    bad.write_bytes(content)
    code, err = _run(capsys, "import", str(bad), "--comm", "x", "-o", str(tmp_path / "c.duckdb"))
    assert code == 2, err
    assert err.startswith("error: ") and "hint:" in err and "Traceback" not in err
    assert not (tmp_path / "c.duckdb").exists() and not list(tmp_path.glob(".c.duckdb*"))


def test_import_refuses_a_perfetto_trace_without_sched_events(tmp_path, capsys):
    trace = tmp_path / "empty.pftrace"
    packet = pb.TracePacket(timestamp=1)
    packet.process_tree.threads.add(tid=5, tgid=5, name="x")
    with trace.open("wb") as handle:
        write_packet(handle, packet.SerializeToString())
    code, err = _run(capsys, "import", str(trace), "--comm", "x", "-o", str(tmp_path / "c.duckdb"))
    assert code == 2 and "no sched_switch events" in err and "sched/sched_switch" in err


def test_import_target_must_be_in_the_trace(synthetic, tmp_path, capsys):
    trace = tmp_path / "out.pftrace"
    export_perfetto(synthetic, trace)
    code, err = _run(capsys, "import", str(trace), "--comm", "nothere", "-o", str(tmp_path / "c.duckdb"))
    assert code == 3 and "no process named 'nothere'" in err and "app (pid 100" in err
    code, err = _run(capsys, "import", str(trace), "-o", str(tmp_path / "c.duckdb"))
    assert code == 2 and "--pid or --comm" in err
    out = tmp_path / "c.duckdb"
    out.write_bytes(b"x")
    code, err = _run(capsys, "import", str(trace), "--comm", "app", "-o", str(out))
    assert code == 2 and "already exists" in err and out.read_bytes() == b"x"


def test_imported_capture_is_a_capture(synthetic, tmp_path, capsys):
    trace = tmp_path / "out.pftrace"
    export_perfetto(synthetic, trace)
    out = tmp_path / "c.duckdb"
    assert _run(capsys, "import", str(trace), "--comm", "app", "-o", str(out))[0] == 0
    code, _err = _run(capsys, "show", str(out))
    assert code == 0
    con = duckdb.connect(str(out), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM sched_slice").fetchone()[0] > 0
    finally:
        con.close()


PROFILE = datafiles.text("observe/interop-profile.toml")


def test_export_with_the_applied_profile_shows_each_threads_layer(synthetic, tmp_path, capsys):
    profile = tmp_path / "app.toml"
    profile.write_text(PROFILE)
    trace = tmp_path / "layers.pftrace"
    code, err = _run(capsys, "export", str(synthetic), "-o", str(trace), "--profile", str(profile))
    assert code == 0, err
    tracks, args = {}, {}
    for raw in read_packets(trace):
        packet = pb.TracePacket.FromString(raw)
        if packet.HasField("track_descriptor"):
            thread = packet.track_descriptor.thread
            tracks[packet.track_descriptor.uuid] = (thread.tid, packet.track_descriptor.name)
        if packet.HasField("track_event") and packet.track_event.debug_annotations:
            args[packet.track_event.track_uuid] = {a.name: a.string_value
                                                   for a in packet.track_event.debug_annotations}
    layer_of = {tid: name for tid, name in tracks.values()}
    assert layer_of[101] == "layer hot" and layer_of[102] == "layer workers"
    assert layer_of[100] == layer_of[200] != "layer hot"      # the catch-all: app's main thread, other
    assert {uuid: arg["layer"] for uuid, arg in args.items()} == \
        {uuid: name.removeprefix("layer ") for uuid, (_tid, name) in tracks.items()}
    # the importer reads the sched data and ignores the layer tracks
    back = import_trace(trace, tmp_path / "back.duckdb", comm="app").path
    assert _raw(back, "raw_sched_switch") == _raw(synthetic, "raw_sched_switch")


def test_import_refuses_a_truncated_trace(synthetic, tmp_path, capsys):
    trace = tmp_path / "out.pftrace"
    export_perfetto(synthetic, trace)
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    code, err = _run(capsys, "import", str(cut), "--comm", "app", "-o", str(tmp_path / "c.duckdb"))
    assert code == 2 and "truncated" in err and "hint:" in err and "Traceback" not in err
    assert not (tmp_path / "c.duckdb").exists()


def test_wake_contexts_go_through_perfetto_as_the_kernels_common_flags(tmp_path):
    """Migration 7's context and task on the CPU survive export and import: as compact wakings'
    flags where that task is the one running, as full events' common_flags and pid otherwise; a
    waking whose context was not recorded comes back without one."""
    start = 1_000 * MS
    b = CaptureBuilder(start_ts=start, duration_ns=50 * MS, nr_cpus=2, target_tgids=[100])
    b.thread(100, 100, "app")
    b.thread(101, 100, "hot-0")
    b.thread(102, 100, "worker")
    b.thread(200, 200, "client")
    for i in range(20):
        t = start + i * 2 * MS
        b.slice(101, 0, t, 2 * MS - 1000, "R+")                                   # hot-0 owns CPU 0
        b.slice(102, 1, t + 500_000, 100_000, "S")                                # CPU 1 idles between
        b.waking(t + 100_000, 0, 102, cpu=0, target_cpu=1, context=1, current=101)   # softirq on hot-0
        b.waking(t + 200_000, 0, 102, cpu=1, target_cpu=1, context=2, current=0)     # hard IRQ on idle
        b.waking(t + 300_000, 101, 102, cpu=0, target_cpu=1, context=0)              # hot-0 itself
        b.waking(t + 400_000, 0, 102, cpu=0, target_cpu=1, context=1, current=200)   # not the running task
        b.waking(t + 450_000, 200, 102, cpu=1, target_cpu=1, context=0)              # a task not running
    b.waking(start + 45 * MS, 0, 102, cpu=1, target_cpu=1)                         # not recorded
    capture = b.write(tmp_path / "contexts.duckdb")
    trace = tmp_path / "contexts.pftrace"
    result = export_perfetto(capture, trace)
    # three a round are compact, but CPU 0's first: no switch before it says who runs there
    assert result.compact_wakings == 3 * 20 - 1 and result.wakings == 5 * 20 + 1, result
    back = import_trace(trace, tmp_path / "back.duckdb", comm="app").path
    assert _raw(back, "raw_sched_waking") == _raw(capture, "raw_sched_waking")
    with open_capture(back) as con:
        assert con.execute("SELECT count(*) FILTER (WHERE context IS NULL), count(DISTINCT context) "
                           "FROM raw_sched_waking").fetchone() == (1, 3)
