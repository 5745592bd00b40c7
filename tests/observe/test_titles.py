"""Process titles over time (schema migration 8, observe/titles.py): the poll records a title
when a process is first read and when it changes, finalize ties each row to its process
instance, and a capture written before the table existed migrates with it empty."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from threadwise.observe.builder import CaptureBuilder
from threadwise.observe.store import SCHEMA_VERSION, open_capture
from threadwise.observe.titles import TitleWatch, read_title

T0 = 1_000_000_000


def test_the_poll_records_a_title_once_until_it_changes(tmp_path):
    watch = TitleWatch()
    first = watch.poll([os.getpid()])
    assert [r.pid for r in first] == [os.getpid()] and first[0].title == read_title(os.getpid())
    assert watch.poll([os.getpid()]) == []            # unchanged: nothing new
    watch.last[os.getpid()] = "python: something else"  # as if the process retitled itself since
    assert [r.title for r in watch.poll([os.getpid()])] == [first[0].title]
    assert watch.reads == 3 and watch.read_ns > 0


def test_a_vanished_process_has_no_title():
    assert read_title(2**22 + 12345) is None and TitleWatch().poll([2**22 + 12345]) == []


def _backend(path: Path) -> Path:
    cap = CaptureBuilder(start_ts=T0, duration_ns=T0, target_tgids=[100, 101])
    cap.thread(100, 100, "postgres")
    cap.thread(101, 101, "postgres", born_ts=T0 + 1000)
    cap.slice(100, 0, T0 + 10, 5000)
    cap.slice(101, 1, T0 + 2000, 5000)
    cap.title(T0 + 1, 100, "postgres: checkpointer")
    cap.title(T0 + 1500, 101, "postgres: app shop 127.0.0.1(5432) idle")
    cap.title(T0 + 9000, 101, "postgres: app shop 127.0.0.1(5432) SELECT")
    return cap.write(path, force=True)


def test_titles_over_time_belong_to_their_process(tmp_path):
    path = _backend(tmp_path / "pg.duckdb")
    with open_capture(path) as con:
        upid = dict(con.execute("SELECT pid, upid FROM process WHERE is_target").fetchall())
        rows = con.execute("SELECT ts, pid, title, upid FROM process_title ORDER BY ts").fetchall()
    assert rows == [(T0 + 1, 100, "postgres: checkpointer", upid[100]),
                    (T0 + 1500, 101, "postgres: app shop 127.0.0.1(5432) idle", upid[101]),
                    (T0 + 9000, 101, "postgres: app shop 127.0.0.1(5432) SELECT", upid[101])]


def test_a_capture_from_before_migration_8_has_an_empty_title_table(tmp_path):
    path = _backend(tmp_path / "old.duckdb")
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE process_title")
    con.execute("DELETE FROM schema_migrations WHERE version > 7")
    con.execute("UPDATE capture SET schema_version = 7")
    con.close()
    with open_capture(path) as con:
        assert con.execute("SELECT schema_version FROM capture").fetchall() == [(SCHEMA_VERSION,)]
        assert con.execute("SELECT count(*) FROM process_title").fetchall() == [(0,)]
