"""bpf tier: observe Redis from Debian under redis-benchmark, on loopback."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from threadwise.observe.store import open_capture

pytestmark = [
    pytest.mark.bpf,
    pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None,
                       reason="needs redis-server and redis-benchmark: run scripts/setup-system.sh"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"redis did not listen on {port}")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A redis-server of our own on loopback, stopped by its PID."""
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--io-threads", "2",
         "--io-threads-do-reads", "yes", "--save", "", "--dir", str(workdir),
         # an AOF with fsync every second gives the bio_aof_fsync thread real work
         "--appendonly", "yes", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        yield server, port
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def redis_capture(redis_server, tmp_path_factory):
    server, port = redis_server
    out = tmp_path_factory.mktemp("redis-capture") / "redis.duckdb"
    observer = subprocess.Popen(
        [sys.executable, "-m", "threadwise.cli", "observe", "--pid", str(server.pid), "-d", "6s",
         "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # start the load once tracing is live (the observer says so on stderr)
    assert observer.stderr is not None
    for line in observer.stderr:
        if "tracing live" in line:
            break
    bench = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-n", "60000",
         "-t", "set,get", "-q"], capture_output=True, text=True, timeout=120, check=False)
    _stdout, stderr = observer.communicate(timeout=120)
    assert observer.returncode == 0, stderr
    assert bench.returncode == 0, bench.stderr
    return out


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
