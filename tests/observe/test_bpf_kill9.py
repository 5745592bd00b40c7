"""observe under kill -9, for real: the tracer stops at once, `clean` leaves nothing, and
`--recover` rebuilds a capture that `show` and `analyze` accept; a live run survives `clean`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.observe import leftovers
from threadwise.refine.measure.bundled import build

pytestmark = pytest.mark.bpf
TRACER_COMMS = {"libbpf": "threadwise-sche", "bpftrace": "bpftrace"}


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          check=False, env=env, cwd=cwd)


def _start_observe(backend: str, out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "threadwise.cli", "observe", "--backend", backend, "-d", "60s", "-o", str(out),
         "--", str(build("rolesim")), "--hot", "1", "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=out.parent)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "tracing live" in line:
            return proc
    raise AssertionError(f"observe never went live: {proc.wait()}")


def _tracer_of(observer: int, backend: str) -> int:
    children = Path(f"/proc/{observer}/task/{observer}/children").read_text().split()
    for child in children:
        if Path(f"/proc/{child}/comm").read_text().strip() == TRACER_COMMS[backend]:
            return int(child)
    raise AssertionError(f"no {backend} tracer among {children}")


def _wait_exit(pidfd: int, timeout_s: float) -> float:
    """Monotonic time at which the process behind `pidfd` exited."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    assert poller.poll(timeout_s * 1000), "still running"
    return time.monotonic()


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    temp = tmp_path / "tmp"
    temp.mkdir()
    return {**os.environ, "TMPDIR": str(temp)}


@pytest.mark.parametrize("backend", ["libbpf", "bpftrace"])
def test_kill9_then_clean_and_recover(tmp_path, env, backend):
    out = tmp_path / "cap.duckdb"
    observer = _start_observe(backend, out, env)
    time.sleep(3)
    tracer = _tracer_of(observer.pid, backend)
    observer_fd, tracer_fd = os.pidfd_open(observer.pid), os.pidfd_open(tracer)
    os.kill(observer.pid, signal.SIGKILL)
    observer_gone = _wait_exit(observer_fd, 10)
    tracer_gone = _wait_exit(tracer_fd, 10)
    observer.wait()
    # The tracer dies with the observer (PR_SET_PDEATHSIG, SIGKILL): without it the tracer would
    # run on and the wait above would fail. How fast is a benchmark's business, not a test's
    # (benchmarks/kill9.py: the libbpf tracer is gone within 100 ms; under load 15-30 on 2 cores
    # a 0.1 s bound here failed at 0.168 s): the bounds only tell death-with-the-observer from
    # anything slower. bpftrace's kernel side stops recording at the observer's exit (its
    # sched_process_exit probe), but the kernel detaches its perf-event probes one synchronize
    # at a time: measured 1.1 s on a quiet host.
    outlived = tracer_gone - observer_gone
    assert outlived < (1.0 if backend == "libbpf" else 5.0), \
        f"tracer outlived the observer by {outlived:.3f} s"
    assert not out.exists()

    listed = _cli("clean", "--keep", str(tmp_path), env=env, cwd=tmp_path)
    assert "partial capture" in listed.stdout and "work directory" in listed.stdout, listed.stdout
    workdir = next(line.split()[1] for line in listed.stdout.splitlines() if "work directory" in line)
    recovered = _cli("observe", "--recover", workdir, env=env, cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stderr
    assert out.is_file() and "marked recovered" in recovered.stdout

    shown = _cli("show", "--json", str(out), env=env, cwd=tmp_path)
    info = json.loads(shown.stdout)
    assert info["end_reason"] == "recovered" and info["tracer_backend"] == backend
    assert "no end-of-run kernel counters" in info["notes"]
    assert info["events_recorded"] > 1000
    analyzed = _cli("analyze", str(out), env=env, cwd=tmp_path)
    assert analyzed.returncode == 0, analyzed.stderr
    assert "hot-*" in analyzed.stdout and "recovered" in analyzed.stdout

    # what recover consumed is gone; clean finds nothing more
    after = _cli("clean", str(tmp_path), env=env, cwd=tmp_path)
    assert "no leftovers" in after.stdout, after.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert list(Path(env["TMPDIR"]).glob(f"{leftovers.WORKDIR_PREFIX}*")) == []


def test_kill9_then_clean_removes_everything(tmp_path, env):
    out = tmp_path / "gone.duckdb"
    observer = _start_observe("libbpf", out, env)
    time.sleep(1.5)
    observer.send_signal(signal.SIGKILL)
    observer.wait()
    time.sleep(0.3)
    done = _cli("clean", str(tmp_path), env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.count("remove  ") == 2, done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def _names(*dirs: Path) -> list[str]:
    return [p.name for d in dirs for p in sorted(d.iterdir())]


def test_a_live_runs_files_survive_a_clean(tmp_path, env):
    out = tmp_path / "live.duckdb"
    observer = _start_observe("libbpf", out, env)
    try:
        time.sleep(1.0)
        before = _names(tmp_path, Path(env["TMPDIR"]))
        done = _cli("clean", str(tmp_path), env=env, cwd=tmp_path)
        assert "no leftovers" in done.stdout, done.stdout
        after = _names(tmp_path, Path(env["TMPDIR"]))
        assert before == after and any(".tmp-" in name for name in after)
    finally:
        observer.send_signal(signal.SIGINT)   # Ctrl-C: the capture completes normally
        _stdout, stderr = givenclock.communicate(observer, timeout=120)
    assert observer.returncode in (0, 130), stderr
    assert out.is_file()
    assert list(Path(env["TMPDIR"]).iterdir()) == []
