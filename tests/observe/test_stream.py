"""The stream parser on a real recording of sched_stream.bt and on crafted lines."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from threadwise.observe.schema import SCHEMAS
from threadwise.observe.stream import StreamParser

FIXTURE = Path(__file__).parent / "fixtures" / "rolesim_stream.txt"


def _parse_all(text: str, chunk: int) -> tuple[StreamParser, dict[str, pa.Table]]:
    parser = StreamParser()
    parts: dict[str, list[pa.Table]] = {}
    for start in range(0, len(text), chunk):
        for name, table in parser.feed(text[start:start + chunk]).tables.items():
            parts.setdefault(name, []).append(table)
    for name, table in parser.close().tables.items():
        parts.setdefault(name, []).append(table)
    return parser, {name: pa.concat_tables(tables) for name, tables in parts.items()}


def test_recorded_stream_parses_completely_and_matches_kernel_counts():
    text = FIXTURE.read_text()
    parser, tables = _parse_all(text, chunk=4096)
    assert parser.unparsed == 0, parser.unparsed_samples
    assert parser.live_ts is not None and parser.end_ts is not None
    # Every event the kernel counted reached a table (this recording lost nothing).
    assert parser.kernel_counts["switch"] == tables["raw_sched_switch"].num_rows
    assert parser.kernel_counts["waking"] == tables["raw_sched_waking"].num_rows
    assert parser.kernel_counts["new"] == tables["raw_task_new"].num_rows
    for name, table in tables.items():
        assert table.schema == SCHEMAS[name]


def test_chunk_boundaries_do_not_change_the_result():
    text = FIXTURE.read_text()
    _, whole = _parse_all(text, chunk=len(text))
    _, pieces = _parse_all(text, chunk=97)   # splits lines everywhere
    assert whole.keys() == pieces.keys()
    for name in whole:
        assert whole[name].equals(pieces[name]), name


def test_named_threads_and_renames_are_recorded():
    _, tables = _parse_all(FIXTURE.read_text(), chunk=8192)
    renames = tables["raw_task_rename"].to_pylist()
    assert {"worker-0", "worker-1", "hot-0", "feeder", "housekeep"} <= {r["new_comm"] for r in renames}
    births = tables["raw_task_new"].to_pylist()
    threads = [b for b in births if b["clone_flags"] & 0x10000]
    assert threads and all(b["tgid"] == b["parent_tgid"] for b in threads)
    processes = [b for b in births if not b["clone_flags"] & 0x10000]
    assert all(b["tgid"] == b["tid"] for b in processes)


def test_comm_with_spaces_and_bars_survives():
    parser = StreamParser()
    chunk = parser.feed("T 10 42 40 C2 CompilerThre\n"
                        "R 11 0 43 GC Thread#0|a|b c\n"
                        "F 12 1 40 40 44 65536 VM Periodic Tas\n")
    seen = chunk.tables["raw_task_seen"].to_pylist()[0]
    assert seen["comm"] == "C2 CompilerThre"
    rename = chunk.tables["raw_task_rename"].to_pylist()[0]
    assert rename["old_comm"] == "GC Thread#0" and rename["new_comm"] == "a|b c"
    assert chunk.tables["raw_task_new"].to_pylist()[0]["comm"] == "VM Periodic Tas"


def test_lost_reports_counts_and_garbage_are_accounted():
    parser = StreamParser()
    chunk = parser.feed("Lost 17 events\nS 1 0 5 1 120 6 120\nS x y\n@events[switch]: 9\nwhat is this\n")
    assert chunk.lost == [17]
    assert parser.kernel_counts == {"switch": 9}
    assert parser.unparsed == 2
    assert chunk.tables["raw_sched_switch"].num_rows == 1


def test_pending_switch_dumped_at_end_becomes_a_switch():
    parser = StreamParser()
    chunk = parser.feed("@pend[1]: (500, 77, 1, 120, 0, 120)\n@pend[0]: (0, 0, 0, 0, 0, 0)\n")
    rows = chunk.tables["raw_sched_switch"].to_pylist()
    assert rows == [{"ts": 500, "cpu": 1, "prev_tid": 77, "prev_state": 1, "prev_prio": 120,
                     "next_tid": 0, "next_prio": 120}]


def test_a_waking_carries_its_context_and_an_older_stream_none():
    """Migration 7: `W ts cpu waker wakee target context current`; the recorded fixture is of the
    script before it (five fields), whose wakings read with context and current NULL."""
    parser = StreamParser()
    chunk = parser.feed("W 100 1 0 42 0 1 777\nW 200 0 9 42 1 0 9\nN 300 0 9 43 1 0 9\nW 400 1 0 42 0\n")
    rows = chunk.tables["raw_sched_waking"].to_pylist()
    assert parser.unparsed == 0
    assert [(r["waker_tid"], r["context"], r["current_tid"], r["is_new"]) for r in rows] == [
        (0, 1, 777, False), (9, 0, 9, False), (9, 0, 9, True), (0, None, None, False)]
    _, tables = _parse_all(FIXTURE.read_text(), chunk=8192)
    assert tables["raw_sched_waking"].column("context").null_count == tables["raw_sched_waking"].num_rows
