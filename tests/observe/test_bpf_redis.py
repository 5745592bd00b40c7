"""bpf tier: observe Redis from Debian under redis-benchmark, on loopback."""

from __future__ import annotations

import pytest

from threadwise.observe.store import open_capture

pytestmark = pytest.mark.bpf
# redis_capture: the shared session fixture in tests/conftest.py


def test_redis_threads_are_in_the_capture(redis_capture):
    with open_capture(redis_capture) as con:
        names = {row[0] for row in con.execute("SELECT name FROM thread WHERE is_target").fetchall()}
    assert "redis-server" in names
    assert "io_thd_1" in names
    assert {"bio_close_file", "bio_aof_fsync", "bio_lazy_free"} <= names, names
    assert "jemalloc_bg_thd" in names, names


def test_redis_threads_have_events(redis_capture):
    with open_capture(redis_capture) as con:
        rows = dict(con.execute(
            "SELECT t.name, count(s.ts) FROM thread t LEFT JOIN sched_slice s USING (utid) "
            "WHERE t.is_target GROUP BY t.name").fetchall())
        wakeups = dict(con.execute(
            "SELECT t.name, count(*) FROM wakeup w JOIN thread t ON t.utid = w.wakee_utid "
            "WHERE t.is_target GROUP BY t.name").fetchall())
    assert rows["redis-server"] > 100, rows     # the event loop ran a lot under the benchmark
    assert rows["io_thd_1"] > 0, rows           # the io thread ran
    assert rows["bio_aof_fsync"] >= 3, rows     # fsync once a second for 6 s
    assert wakeups.get("redis-server", 0) > 100, wakeups
    # the capture also knows who else held the CPUs (redis-benchmark, the tracer)
    with open_capture(redis_capture) as con:
        others = {row[0] for row in con.execute(
            "SELECT DISTINCT t.name FROM sched_slice JOIN thread t USING (utid) WHERE NOT t.is_target"
        ).fetchall()}
    assert "redis-benchmark" in others
