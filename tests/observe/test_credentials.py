"""Each target process's effective uid and gid (schema migration 6): read from /proc, carried
into the `process` table, and NULL (not an error) in captures written before they existed."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from threadwise.observe import procfs
from threadwise.observe.builder import CaptureBuilder
from threadwise.observe.store import SCHEMA_VERSION, open_capture


def test_credentials_are_the_effective_ids_of_a_live_process():
    assert procfs.process_credentials(os.getpid()) == (os.geteuid(), os.getegid())
    snaps = procfs.snapshot_process(os.getpid())
    assert snaps and {(s.euid, s.egid) for s in snaps} == {(os.geteuid(), os.getegid())}


def test_a_vanished_process_has_no_credentials():
    assert procfs.process_credentials(2**22 + 12345) is None   # above pid_max's default ceiling


def _two_processes(path: Path, *, worker_euid: int | None) -> Path:
    cap = CaptureBuilder(start_ts=0, duration_ns=1_000_000_000, target_tgids=[100, 101])
    cap.thread(100, 100, "nginx")
    cap.thread(101, 101, "nginx")
    cap.slice(100, 0, 1000, 5000)
    cap.slice(101, 1, 2000, 5000)
    cap.process_identity(100, cmdline="nginx: master process /usr/sbin/nginx", euid=0, egid=0)
    cap.process_identity(101, cmdline="nginx: worker process", euid=worker_euid, egid=33)
    return cap.write(path, force=True)


def test_the_process_table_carries_cmdline_and_effective_ids(tmp_path):
    path = _two_processes(tmp_path / "titles.duckdb", worker_euid=33)
    with open_capture(path) as con:
        rows = con.execute("SELECT pid, cmdline, euid, egid FROM process WHERE is_target ORDER BY pid"
                           ).fetchall()
    assert rows == [(100, "nginx: master process /usr/sbin/nginx", 0, 0),
                    (101, "nginx: worker process", 33, 33)]


def test_a_capture_finalized_before_migration_6_reads_with_null_ids(tmp_path):
    """An older capture's process table gets the columns, NULL: unknown, so analyze reads it
    (and cannot select roles by uid: docs/analyze.md says what follows)."""
    path = _two_processes(tmp_path / "old.duckdb", worker_euid=33)
    con = duckdb.connect(str(path))
    for table in ("proc_snapshot", "process"):
        for column in ("euid", "egid"):
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version > 5")
    con.execute("UPDATE capture SET schema_version = 5")
    con.close()
    with open_capture(path) as con:
        assert con.execute("SELECT schema_version FROM capture").fetchall() == [(SCHEMA_VERSION,)]
        assert con.execute("SELECT pid, euid, egid FROM process WHERE is_target ORDER BY pid"
                           ).fetchall() == [(100, None, None), (101, None, None)]
        assert con.execute("SELECT count(*) FROM proc_snapshot WHERE euid IS NOT NULL"
                           ).fetchall() == [(0,)]
