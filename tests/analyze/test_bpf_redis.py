"""bpf tier: analyze a live Redis (our own server on loopback, stopped by its PID)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from itertools import pairwise

import polars as pl
import pytest

from threadwise.analyze import analyze_capture

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
def redis_analysis(tmp_path_factory):
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--io-threads", "2",
         "--io-threads-do-reads", "yes", "--save", "", "--dir", str(workdir), "--daemonize", "no",
         # an AOF fsynced every second gives bio_aof_fsync work: its idle siblings still merge
         "--appendonly", "yes", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        out = workdir / "redis.duckdb"
        observer = subprocess.Popen(
            [sys.executable, "-m", "threadwise.cli", "observe", "--pid", str(server.pid), "-d", "5s",
             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert observer.stderr is not None
        for line in observer.stderr:
            if "tracing live" in line:
                break
        bench = subprocess.Popen(
            ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-n", "2000000",
             "-t", "set,get", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _stdout, stderr = observer.communicate(timeout=120)
        bench.send_signal(signal.SIGTERM)
        bench.wait(timeout=30)
        assert observer.returncode == 0, stderr
        yield analyze_capture(out)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_redis_groups(redis_analysis):
    groups = {row["pattern"]: row for row in redis_analysis.groups.iter_rows(named=True)}
    assert redis_analysis.process_name == "redis-server"
    for pattern, prefix in (("redis-server", "redis-server"), ("io_thd_*", "io_thd_"), ("bio_*", "bio_"),
                            ("jemalloc_bg_thd", "jemalloc_bg_thd")):
        assert pattern in groups, f"{pattern} missing: {sorted(groups)}"
        assert groups[pattern]["match_prefixes"] == [prefix]
        assert groups[pattern]["separable"]
    assert groups["bio_*"]["thread_count"] == 3
    assert groups["redis-server"]["in_wake_chain"]


def test_main_thread_wakes_the_io_threads(redis_analysis):
    edges = redis_analysis.wake_edges.filter(pl.col("causal"))
    main_to_io = edges.filter((pl.col("waker") == "redis-server")
                              & pl.col("wakee").str.starts_with("io_thd_"))
    assert main_to_io.height >= 1, edges.select("waker", "wakee", "wakeups", "lift")
    assert main_to_io["wakeups"].sum() > 10
    chains = redis_analysis.pattern_chains
    assert any(("redis-server", "io_thd_*") in pairwise(p)
               for p in chains["patterns"].to_list())
