"""finalize.sql on hand-made events: slices, states, wakeups, thread instances."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from threadwise.errors import InputError, UsageError
from threadwise.observe.builder import CaptureBuilder
from threadwise.observe.checks import runtime_agreement
from threadwise.observe.store import CaptureWriter, open_capture, temp_path_for


def build(path, *, end_ts, events=None, target_tgids=(), snapshots=(), events_lost=0, force=True):
    """A capture from raw rows (start_ts 0), through the one capture builder."""
    cap = CaptureBuilder(start_ts=0, duration_ns=end_ts, target_tgids=list(target_tgids),
                         events_lost=events_lost)
    for table, rows in (events or {}).items():
        cap.events(table, rows)
    for snap in snapshots:
        cap.snapshot(*snap[:5], runtime_ns=snap[5])
    return cap.write(path, force=force)


S, R_PLUS = 1, 256


@pytest.fixture
def capture(tmp_path):
    # cpu0: idle -> A(10) at 100; A sleeps at 300 -> idle; idle -> B(11) at 500 .. end
    # cpu1: idle .. B wakes A at 400 (target cpu1); A runs on cpu1 600..800, preempted by idle? no:
    #       A preempted (R+) at 800 by C(12) which runs to the end.
    events = {
        "raw_sched_switch": [
            (100, 0, 0, 0, 120, 10, 120),
            (300, 0, 10, S, 120, 0, 120),
            (500, 0, 0, 0, 120, 11, 120),
            (600, 1, 0, 0, 120, 10, 120),
            (800, 1, 10, R_PLUS, 120, 12, 120),
        ],
        "raw_sched_waking": [(400, 0, 11, 10, 1, False, 0, 11)],
        "raw_task_seen": [(300, 10, 10, "alpha"), (800, 10, 10, "alpha")],
        "raw_task_new": [],
    }
    snaps = [(50, "start", 10, 10, "alpha", 0), (950, "end", 10, 10, "alpha", 400)]
    return build(tmp_path / "c.duckdb", end_ts=1000, events=events, target_tgids=(10,), snapshots=snaps)


def test_slices_tile_each_cpu_from_start_to_end(capture):
    with open_capture(capture) as con:
        rows = con.execute("SELECT ts, dur, cpu, t.tid, end_state FROM sched_slice "
                           "JOIN thread t USING (utid) ORDER BY cpu, ts").fetchall()
    assert rows == [
        (0, 100, 0, 0, "R"), (100, 200, 0, 10, "S"), (300, 200, 0, 0, "R"), (500, 500, 0, 11, None),
        (0, 600, 1, 0, "R"), (600, 200, 1, 10, "R+"), (800, 200, 1, 12, None),
    ]


def test_thread_state_sleep_wake_and_preemption(capture):
    with open_capture(capture) as con:
        rows = con.execute(
            "SELECT ts, dur, state, w.tid AS waker FROM thread_state s "
            "JOIN thread t USING (utid) LEFT JOIN thread w ON w.utid = s.waker_utid "
            "WHERE t.tid = 10 ORDER BY ts").fetchall()
    assert rows == [(100, 200, "Running", None), (300, 100, "S", None), (400, 200, "R", 11),
                    (600, 200, "Running", None)]


def test_runtime_check_uses_the_snapshot_window(capture):
    with open_capture(capture) as con:
        frame = runtime_agreement(con)
    row = frame.row(0, named=True)
    assert (row["tid"], row["kernel_ns"], row["traced_ns"], row["slices"]) == (10, 400, 400, 2)
    assert row["agrees"]


MS = 1_000_000


def _stolen_capture(path, *, kernel_ms, steal_ms=None):
    """Thread 10 traced on cpu0 for 1000 ms inside its snapshot window; schedstat says
    `kernel_ms`; cpu0's steal counter grew by `steal_ms` over the window (None: no reads)."""
    cap = CaptureBuilder(start_ts=0, duration_ns=2000 * MS, target_tgids=[10])
    cap.events("raw_sched_switch", [(100 * MS, 0, 0, 0, 120, 10, 120),
                                     (1100 * MS, 0, 10, S, 120, 0, 120)])
    cap.events("raw_task_seen", [(1100 * MS, 10, 10, "alpha")])
    cap.snapshot(50 * MS, "start", 10, 10, "alpha", runtime_ns=0)
    cap.snapshot(1500 * MS, "end", 10, 10, "alpha", runtime_ns=kernel_ms * MS)
    if steal_ms is not None:
        base = 5000 * MS if steal_ms >= 0 else 0
        cap.steal(40 * MS, "start", 0, base).steal(40 * MS, "start", 1, 7000 * MS)
        cap.steal(1600 * MS, "end", 0, base + max(steal_ms, 0) * MS).steal(1600 * MS, "end", 1, 7000 * MS)
    with open_capture(cap.write(path)) as con:
        return runtime_agreement(con).row(0, named=True)


def test_steal_widens_the_runtime_check_above_only(tmp_path):
    # 100 ms of the traced 1000 are steal: schedstat leaves them out; the tolerance without
    # steal (2 ms + 2 %) is about 20 ms
    without = _stolen_capture(tmp_path / "a.duckdb", kernel_ms=900)
    assert (without["diff_ns"], without["steal_ns"], without["agrees"]) == (100 * MS, 0, False)
    stolen = _stolen_capture(tmp_path / "b.duckdb", kernel_ms=900, steal_ms=100)
    # the counter's growth plus 20 ms (USER_HZ units, the tick), only on the CPU it ran on
    assert stolen["steal_ns"] == 120 * MS and stolen["agrees"], stolen
    # steal can only make the trace read more: 100 ms less is still a disagreement
    short = _stolen_capture(tmp_path / "c.duckdb", kernel_ms=1100, steal_ms=100)
    assert short["diff_ns"] == -100 * MS and not short["agrees"], short
    # a CPU whose counter never moved off 0 (bare metal) had no steal to allow for
    bare = _stolen_capture(tmp_path / "d.duckdb", kernel_ms=900, steal_ms=-1)
    assert bare["steal_ns"] == 0 and not bare["agrees"], bare


def test_tid_reuse_gives_two_thread_instances(tmp_path):
    events = {
        "raw_task_new": [(50, 0, 1, 1, 20, 1, 0x10000, "first"), (300, 0, 1, 1, 20, 1, 0x10000, "second")],
        "raw_sched_switch": [(100, 0, 0, 0, 120, 20, 120), (200, 0, 20, 16, 120, 0, 120),
                             (400, 0, 0, 0, 120, 20, 120)],
        "raw_task_exit": [(190, 0, 20, 1, "first")],
        "raw_task_rename": [(310, 0, 20, "second", "second-name-15c")],
    }
    path = build(tmp_path / "reuse.duckdb", end_ts=500, events=events)
    with open_capture(path) as con:
        threads = con.execute("SELECT utid, name, start_ts, end_ts FROM thread WHERE tid = 20 "
                              "ORDER BY start_ts").fetchall()
        per_instance = con.execute("SELECT utid, sum(dur) FROM sched_slice WHERE utid IN "
                                   "(SELECT utid FROM thread WHERE tid = 20) GROUP BY utid ORDER BY utid"
                                   ).fetchall()
    assert [(t[1], t[2], t[3]) for t in threads] == [("first", 50, 190), ("second-name-15c", 300, None)]
    assert [d for _, d in per_instance] == [100, 100]


def test_empty_capture_finalizes(tmp_path):
    path = build(tmp_path / "empty.duckdb", end_ts=10, events={})
    with open_capture(path) as con:
        assert con.execute("SELECT count(*) FROM sched_slice").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM thread_state").fetchall() == [(0,)]


def test_writer_renames_into_place_only_when_finalized(tmp_path):
    final = tmp_path / "x.duckdb"
    writer = CaptureWriter(final)
    assert temp_path_for(final).exists() and not final.exists()
    writer.abandon()
    assert not temp_path_for(final).exists() and not final.exists()


def test_existing_capture_is_not_overwritten_without_force(tmp_path):
    path = build(tmp_path / "c.duckdb", end_ts=10, events={}, force=False)
    with pytest.raises(UsageError, match="already exists"):
        CaptureWriter(path)
    build(path, end_ts=20, events={}, force=True)
    with open_capture(path) as con:
        assert con.execute("SELECT duration_ns FROM capture").fetchall() == [(20,)]


def test_bad_output_paths(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        CaptureWriter(tmp_path / "nope" / "c.duckdb")
    with pytest.raises(UsageError, match="is a directory"):
        CaptureWriter(tmp_path)


def test_open_capture_rejects_what_is_not_a_capture(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        open_capture(tmp_path / "missing.duckdb").__enter__()
    junk = tmp_path / "junk.duckdb"
    junk.write_text("this is not a database")
    with pytest.raises(InputError):
        open_capture(junk).__enter__()
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE t (x INT)").close()
    with pytest.raises(InputError, match="not a threadwise capture"):
        open_capture(other).__enter__()


def test_newer_schema_is_refused(tmp_path):
    path = build(tmp_path / "c.duckdb", end_ts=10, events={})
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_migrations VALUES (99, now(), 'future')")
    con.close()
    with pytest.raises(InputError, match="newer than this threadwise"):
        open_capture(path).__enter__()


def test_broken_switch_chain_is_a_recorded_gap(tmp_path):
    # cpu0: idle -> A at 100; then B -> idle at 300 (A's switch-out to B was never traced)
    events = {"raw_sched_switch": [(100, 0, 0, 0, 120, 10, 120), (300, 0, 11, S, 120, 0, 120)]}
    path = build(tmp_path / "gap.duckdb", end_ts=400, events=events, events_lost=2)
    with open_capture(path) as con:
        assert con.execute("SELECT cpu, before_ts, after_ts, expected_tid, found_tid FROM switch_gap"
                           ).fetchall() == [(0, 100, 300, 10, 11)]
        assert con.execute("SELECT events_lost, switch_gaps FROM capture").fetchall() == [(3, 1)]
        # A's slice runs into the gap: no end state, flagged as clipped
        assert con.execute("SELECT dur, end_state, clipped FROM sched_slice JOIN thread USING (utid) "
                           "WHERE tid = 10").fetchall() == [(200, None, True)]


def test_a_switch_at_the_capture_end_is_no_gap(tmp_path):
    # The capture ends at its last event (capture.py, recover.py): here a switch at 400, whose
    # zero-length last slice must not be taken for a gap closed by its own switch.
    events = {"raw_sched_switch": [(100, 0, 0, 0, 120, 10, 120), (400, 0, 10, S, 120, 11, 120)]}
    path = build(tmp_path / "end.duckdb", end_ts=400, events=events)
    with open_capture(path) as con:
        assert con.execute("SELECT count(*) FROM switch_gap").fetchall() == [(0,)]
        assert con.execute("SELECT events_lost, switch_gaps FROM capture").fetchall() == [(0, 0)]
        assert con.execute("SELECT tid, dur, end_state, clipped FROM sched_slice JOIN thread USING (utid) "
                           "WHERE tid IN (10, 11) ORDER BY ts").fetchall() == [
            (10, 300, "S", False), (11, 0, None, True)]


def version_1_capture(path: Path) -> Path:
    """A capture as written before migration 2 existed (no proc_snapshot.read_ns, version 1)."""
    build(path, end_ts=10, events={})
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE proc_snapshot DROP COLUMN read_ns")
    con.execute("DELETE FROM schema_migrations WHERE version > 1")
    con.execute("UPDATE capture SET schema_version = 1")
    con.close()
    return path


def test_a_version_1_capture_is_migrated_on_open(tmp_path):
    from threadwise.observe.store import SCHEMA_VERSION

    path = version_1_capture(tmp_path / "old.duckdb")
    with open_capture(path) as con:
        versions = [v for (v,) in con.execute(
            "SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
        columns = {c for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'proc_snapshot'").fetchall()}
        assert con.execute("SELECT schema_version FROM capture").fetchall() == [(SCHEMA_VERSION,)]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert "read_ns" in columns


def test_reading_an_old_capture_never_writes_it(tmp_path):
    """open_capture(read_only=True) migrates a copy: the file keeps its bytes and works read-only."""
    import hashlib
    import os

    from threadwise.observe.store import SCHEMA_VERSION

    path = version_1_capture(tmp_path / "old.duckdb")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    os.chmod(path, 0o444)
    os.chmod(tmp_path, 0o555)   # not even a WAL could be created beside it
    try:
        with open_capture(path) as con:
            assert con.execute("SELECT schema_version FROM capture").fetchall() == [(SCHEMA_VERSION,)]
            assert con.execute("SELECT count(*) FROM information_schema.columns WHERE "
                               "table_name = 'proc_snapshot' AND column_name = 'read_ns'"
                               ).fetchall() == [(1,)]
    finally:
        os.chmod(tmp_path, 0o755)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT max(version) FROM schema_migrations").fetchall() == [(1,)]


def _woken_three_ways(path: Path) -> Path:
    """A (10) is woken by B (11) in task context, by a softirq running on C (12, another
    process), and by a hard interrupt on the idle CPU; one waking recorded no context."""
    events = {
        "raw_sched_switch": [(100, 0, 0, 0, 120, 11, 120), (200, 1, 0, 0, 120, 12, 120)],
        "raw_sched_waking": [(300, 0, 11, 10, 0, False, 0, 11), (400, 1, 0, 10, 1, False, 1, 12),
                             (500, 0, 0, 10, 0, False, 2, 0), (600, 0, 0, 10, 0, False, None, None)],
    }
    return build(path, end_ts=1000, events=events, target_tgids=(10,))


def test_a_wakeup_keeps_its_context_and_the_task_on_the_cpu(tmp_path):
    with open_capture(_woken_three_ways(tmp_path / "c.duckdb")) as con:
        rows = con.execute(
            "SELECT w.ts, w.context::VARCHAR, r.tid, c.tid FROM wakeup w LEFT JOIN thread r "
            "ON r.utid = w.waker_utid LEFT JOIN thread c ON c.utid = w.current_utid ORDER BY w.ts"
        ).fetchall()
    assert rows == [(300, "task", 11, 11), (400, "softirq", None, 12), (500, "hardirq", None, 0),
                    (600, None, None, None)]


def test_a_capture_finalized_before_migration_7_reads_with_null_contexts(tmp_path):
    from threadwise.observe.store import SCHEMA_VERSION

    path = _woken_three_ways(tmp_path / "old.duckdb")
    con = duckdb.connect(str(path))
    for table, columns in (("raw_sched_waking", ("context", "current_tid")),
                           ("wakeup", ("context", "current_utid"))):
        for column in columns:
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version > 6")
    con.execute("UPDATE capture SET schema_version = 6")
    con.close()
    with open_capture(path) as con:
        assert con.execute("SELECT schema_version FROM capture").fetchall() == [(SCHEMA_VERSION,)]
        assert con.execute("SELECT count(*), count(context), count(current_utid), count(waker_utid) "
                           "FROM wakeup").fetchall() == [(4, 0, 0, 1)]
