"""The fast ingest path (observe/ingest.py + finalize.sql) builds the same capture as the old one.

The old path is kept as the reference: 256 MB reads with an INSERT and a CHECKPOINT per read,
and finalize.sql as it was before issue 10 (ASOF joins), verbatim in
fixtures/finalize_asof.sql. Both run on the same record files, shaped like a real capture
(tests/synthetic/records_gen.py) with the cases finalize must get right: a reused tid, births,
exits, renames, migrations, and switch-chain gaps (switch records cut out of the file), plus
a truncated trailing record. Every derived table must hold the same rows (as multisets: the
derived tables are not physically ordered) with the same column names and types.

Why equality holds beyond this input: the new finalize.sql maps (tid, ts) to a thread
instance with an equality join on tid and ts inside [born_ts, next_born_ts), where the old one
took the ASOF match (the latest born_ts <= ts); instances of one tid have distinct born_ts
(finalize.sql: DISTINCT births) and so tile the time line, which makes the two the same
instance, and every event has one (its tid's first event is covered). The per-CPU window is
the same window over the same rows, only narrower, and each slice's utid is the one of its
next_tid, as before. Where the old path was not deterministic (two switches of one CPU, or two
wakings of one thread, at the same nanosecond) neither is the new one, so the input has none.
Two changes of form are deliberate (docs/capture.md): end_state is an ENUM of its letters
where it was a VARCHAR (the same values; cheaper to write and scan), and thread_state is a view
over sched_slice and thread_wait where it was a table (the same rows).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from benchmarks.ingest import build_capture, generate
from threadwise.observe import records as rec
from threadwise.observe.ingest import ingest_records
from threadwise.observe.records import RecordReader
from threadwise.observe.store import RAW_TABLES, CaptureWriter

DERIVED = ("sched_slice", "thread_state", "wakeup", "migration", "thread", "process", "switch_gap")
VOLATILE = {"capture_id", "start_wall"}   # differ between any two builds
END_STATE = "ENUM('R+', 'R', 'S', 'D', 'T', 't', 'X', 'Z', 'P', 'I')"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    generate(directory, 60_000, seed=3)
    switches = np.fromfile(directory / "switch.bin", rec.SWITCH)
    # lose a few switches, as the kernel sometimes does: each breaks its CPU's chain
    keep = np.ones(len(switches), bool)
    keep[[500, 9_001, 20_002]] = False
    data = switches[keep].tobytes() + switches[:1].tobytes()[:17]   # and a record cut short
    (directory / "switch.bin").write_bytes(data)
    return directory


@pytest.fixture(scope="module")
def both(records, tmp_path_factory):
    out = tmp_path_factory.mktemp("captures")
    old = out / "old.duckdb"
    new = out / "new.duckdb"
    build_capture(records, old, way="old")
    build_capture(records, new, way="new")
    con = duckdb.connect()
    con.execute(f"ATTACH '{old}' AS old (READ_ONLY)")
    con.execute(f"ATTACH '{new}' AS new (READ_ONLY)")
    yield con
    con.close()


def _columns(con, db, table):
    return con.execute("SELECT column_name, data_type FROM information_schema.columns "
                       "WHERE table_catalog = ? AND table_name = ? ORDER BY ordinal_position",
                       [db, table]).fetchall()


def _rows_not_in(con, table, columns, a, b):
    """Rows of `table` in database `a` (as a multiset of `columns`) that `b` lacks."""
    return con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM {a}.{table} "
                       f"EXCEPT ALL SELECT {columns} FROM {b}.{table})").fetchone()[0]


# Columns finalize.sql gained after the reference was frozen (additive; the reference stays
# verbatim): schema migration 6's effective ids of each process, migration 7's wakeup context.
ADDED_SINCE_REFERENCE = {"process": {"euid", "egid"}, "wakeup": {"context", "current_utid"}}


@pytest.mark.parametrize("table", [*DERIVED, "capture", *RAW_TABLES])
def test_new_path_builds_the_same_tables(both, table):
    columns = _columns(both, "old", table)
    added = ADDED_SINCE_REFERENCE.get(table, set())
    new_columns = [(name, "VARCHAR" if kind == END_STATE else kind)
                   for name, kind in _columns(both, "new", table) if name not in added]
    assert columns and columns == new_columns
    names = ", ".join(f'"{name}"' for name, _ in columns if name not in VOLATILE)
    count = both.execute(f"SELECT count(*) FROM old.{table}").fetchone()[0]
    assert count == both.execute(f"SELECT count(*) FROM new.{table}").fetchone()[0]
    for a, b in (("old", "new"), ("new", "old")):
        extra = _rows_not_in(both, table, names, a, b)
        assert extra == 0, f"{table}: {extra} of {count} rows of {a} are not in {b}"


def test_the_input_has_what_finalize_must_get_right(both):
    """Otherwise equality would prove little: gaps, a reused tid, births, exits, migrations."""
    one = both.execute
    assert one("SELECT count(*) FROM new.switch_gap").fetchone()[0] == 3
    assert one("SELECT count(*) FROM (SELECT tid FROM new.thread GROUP BY tid HAVING count(*) > 1)"
               ).fetchone()[0] >= 1
    assert one("SELECT count(*) FROM new.thread WHERE start_ts IS NOT NULL").fetchone()[0] >= 2
    assert one("SELECT count(*) FROM new.thread WHERE end_ts IS NOT NULL").fetchone()[0] >= 2
    assert one("SELECT count(*) FROM new.migration").fetchone()[0] > 100
    assert one("SELECT count(*) FROM new.raw_task_rename").fetchone()[0] >= 1
    assert one("SELECT count(DISTINCT state) FROM new.thread_state").fetchone()[0] >= 4
    # the new capture stores each gap once and unfolds it in the view
    assert one("SELECT table_type FROM information_schema.tables WHERE table_catalog = 'new' "
               "AND table_name = 'thread_state'").fetchone()[0] == "VIEW"
    gaps = one("SELECT count(*) FROM new.thread_wait").fetchone()[0]
    assert gaps == one("SELECT count(*) FROM old.thread_state WHERE state <> 'Running'").fetchone()[0] \
        - one("SELECT count(*) FROM new.thread_wait WHERE wake_ts IS NOT NULL").fetchone()[0] > 0
    # no ties where the old path was not deterministic
    assert one("SELECT count(*) FROM (SELECT cpu, ts FROM new.raw_sched_switch GROUP BY ALL "
               "HAVING count(*) > 1)").fetchone()[0] == 0
    assert one("SELECT count(*) FROM (SELECT wakee_utid, ts FROM new.wakeup GROUP BY ALL "
               "HAVING count(*) > 1)").fetchone()[0] == 0


def test_the_bound_builds_the_same_derived_tables_and_no_raw_events(records, both, tmp_path):
    """benchmarks/ingest.py --bound measures a capture without raw events: it must do the same
    derived work, or the bound would be a bound on something else."""
    noraw = tmp_path / "noraw.duckdb"
    build_capture(records, noraw, way="noraw", threads=1)
    both.execute(f"ATTACH '{noraw}' AS noraw (READ_ONLY)")
    try:
        stored = {row[0] for row in both.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'noraw'").fetchall()}
        assert "raw_sched_switch" not in stored and "raw_sched_waking" not in stored
        assert "raw_sched_migrate" in stored
        for table in (*DERIVED, "thread_wait"):
            columns = ", ".join(f'"{name}"' for name, _ in _columns(both, "new", table))
            for a, b in (("new", "noraw"), ("noraw", "new")):
                extra = _rows_not_in(both, table, columns, a, b)
                assert extra == 0, f"{table}: {extra} rows of {a} are not in {b}"
    finally:
        both.execute("DETACH noraw")


def test_ingest_flushes_in_pieces_and_keeps_every_record(records, tmp_path):
    writer = CaptureWriter(tmp_path / "c.duckdb")
    try:
        reader = RecordReader(records)
        events = ingest_records(reader, writer, read_bytes=64 << 10, flush_rows=5_000)
        on_disk = {name: (records / name).stat().st_size // dtype.itemsize
                   for name, dtype in rec.FILES.items()}
        assert writer.rows["raw_sched_switch"] == on_disk["switch.bin"]
        assert writer.rows["raw_sched_waking"] == on_disk["waking.bin"]
        assert writer.rows["raw_sched_migrate"] == on_disk["migrate.bin"]
        assert events == sum(writer.rows[t] for t in RAW_TABLES if t != "raw_task_seen")
        assert reader.trailing() == {"switch.bin": 17}
        assert ingest_records(reader, writer) == 0       # nothing new: nothing appended
    finally:
        writer.abandon()
