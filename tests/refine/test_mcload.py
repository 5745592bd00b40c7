"""mcload, the bundled memcached load generator, against a real memcached on loopback.

The memcached workload's numbers come from mcload's one JSON line per window; these tests run
the real generator against Debian's memcached (started here, stopped by PID) and check what a
ladder relies on: the line parses into the workload's objective, the counts agree with the
rate, and a window that cannot be measured is an exit status with a reason, never a number.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import _free_port, _wait_for_port, stop_by_pid
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.metrics import parse_metrics
from threadwise.refine.measure.workload import bundled_workload_path, load_workload, render_argv


@pytest.fixture(scope="module")
def memcached_port() -> Iterator[int]:
    if shutil.which("memcached") is None:
        pytest.skip("needs memcached: run scripts/setup-system.sh")
    port = _free_port()
    server = subprocess.Popen(["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                               "-t", "2", "-m", "64"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, server.pid)
        yield port
    finally:
        stop_by_pid(server)


def mcload(*args: str) -> subprocess.CompletedProcess[str]:
    # a window's worth of time under any load this host has: the generator's own clock ends it
    return subprocess.run([str(build("mcload")), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_window_is_one_json_line_with_the_objective_and_consistent_counts(memcached_port: int):
    done = mcload("--port", str(memcached_port), "--conns", "3", "--seconds", "1", "--set-pct", "20")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    fields = json.loads(line)
    assert fields["gets"] > 0 and fields["sets"] > 0
    # the rate is over the run's own elapsed time, which is at least the second asked for
    assert 0 < fields["ops_per_s"] <= fields["gets"] + fields["sets"]
    assert fields["get_p50_us"] <= fields["get_p99_us"]
    assert 0 <= fields["misses"] <= fields["gets"]
    workload = load_workload(bundled_workload_path("memcached"))
    values = parse_metrics(workload.load.parser, done.stdout, source=workload.load.source)
    assert values["ops_per_s"] == fields["ops_per_s"] and values["get_p99_us"] == fields["get_p99_us"]


def test_a_value_once_set_is_read_back(memcached_port: int):
    """Every SET of a 2-key space is read back by the GETs after it: misses stay below the keys'
    first reads (a reply that were not memcached's would be an error, not a miss)."""
    done = mcload("--port", str(memcached_port), "--conns", "1", "--seconds", "1", "--keys", "2",
                  "--set-pct", "50", "--think-us", "0")
    assert done.returncode == 0, done.stderr
    fields = json.loads(done.stdout)
    assert fields["gets"] > 10 and fields["misses"] <= 2 + fields["gets"] // 50


def test_no_server_is_an_error_with_the_address_and_no_number():
    port = _free_port()   # nothing listens on it
    done = mcload("--port", str(port), "--seconds", "1")
    assert done.returncode == 1 and done.stdout == ""
    assert f"connect 127.0.0.1:{port}" in done.stderr and "refused" in done.stderr


@pytest.mark.parametrize("args", [["--conns", "0"], ["--port", "70000"], ["--bogus", "1"], ["--seconds"]])
def test_bad_options_exit_2_with_usage(args: list[str]):
    done = mcload(*args)
    assert done.returncode == 2 and "usage: " in done.stderr and done.stdout == ""


def test_the_workload_runs_mcload_for_the_window_as_a_fifo_generator():
    workload = load_workload(bundled_workload_path("memcached"))
    assert workload.service is not None and workload.target.process == "memcached"
    argv = render_argv(workload.load.command or [], window_s=3.0)
    assert argv[0] == str(build("mcload")) and argv[argv.index("--seconds") + 1] == "3"
    assert workload.load.priority == "fifo"
