"""bpf tier: how a capture ends — duration, Ctrl-C, kill -9, a target that exits — and targets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.observe import procfs
from threadwise.observe.store import open_capture, temp_path_for
from threadwise.refine.measure.bundled import build

pytestmark = pytest.mark.bpf
OBSERVE = [sys.executable, "-m", "threadwise.cli", "observe"]


def _start_observer(*args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*OBSERVE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "tracing live" in line:
            return proc
    givenclock.wait(proc, timeout=30)
    raise AssertionError(f"observer never went live (exit {proc.returncode})")


def _wait_gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not procfs.process_alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def sleeper():
    """A process of ours to observe by pid; stopped by PID."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_ctrl_c_ends_cleanly_and_keeps_the_capture(tmp_path):
    out = tmp_path / "c.duckdb"
    proc = _start_observer("-o", str(out), "--", str(build("rolesim")), "--hot", "1")
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = givenclock.communicate(proc, timeout=60)
    assert proc.returncode == 0, stderr
    assert "interrupted" in stderr
    with open_capture(out) as con:
        reason, events = con.execute("SELECT end_reason, events_recorded FROM capture").fetchall()[0]
        names = {r[0] for r in con.execute("SELECT name FROM thread WHERE is_target").fetchall()}
    assert reason == "interrupted" and events > 100
    assert "hot-0" in names


def test_kill_9_leaves_nothing_under_the_final_name(tmp_path, sleeper):
    out = tmp_path / "c.duckdb"
    proc = _start_observer("--pid", str(sleeper.pid), "-d", "60s", "-o", str(out))
    children = procfs.children_of(proc.pid)
    assert children, "the observer should have a bpftrace child"
    time.sleep(1.0)
    proc.kill()
    proc.wait()
    assert not out.exists()
    # the tracer dies with the observer (PR_SET_PDEATHSIG), it does not trace on alone
    for child in children:
        assert _wait_gone(child), f"child {child} survived the observer"
    # the half-written file, if any, is only under the temporary name
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert all(name.startswith(".c.duckdb.tmp-") for name in leftovers), leftovers
    # and `clean` removes it with the run's work directory
    cleaned = subprocess.run([sys.executable, "-m", "threadwise.cli", "clean", str(tmp_path)],
                             capture_output=True, text=True, check=False)
    assert "work directory" in cleaned.stdout, cleaned.stdout
    assert list(tmp_path.iterdir()) == []
    assert temp_path_for(out).name.startswith(".c.duckdb.tmp-")


def test_target_exiting_mid_capture_keeps_the_capture_and_says_so(tmp_path):
    # the target ends once tracing is live, stopped by its PID (a wall-clock lifetime ended before
    # the observer started when a lab held the host)
    short = subprocess.Popen(["sleep", "600"])
    out = tmp_path / "c.duckdb"
    try:
        observer = _start_observer("--pid", str(short.pid), "-d", "30s", "-o", str(out))
        time.sleep(1)
        short.terminate()
        stdout, stderr = givenclock.communicate(observer, timeout=60)
        result = subprocess.CompletedProcess(observer.args, observer.returncode, stdout, stderr)
    finally:
        short.kill()
        short.wait()
    assert result.returncode == 3, result.stderr
    assert "the target exited after" in result.stderr and str(out) in result.stderr
    with open_capture(out) as con:
        reason, duration = con.execute("SELECT end_reason, duration_ns FROM capture").fetchall()[0]
    assert reason == "target-exited" and duration < 20e9


def test_existing_capture_needs_force(tmp_path, sleeper):
    out = tmp_path / "c.duckdb"
    first = givenclock.run([*OBSERVE, "--pid", str(sleeper.pid), "-d", "500ms", "-o", str(out)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    again = givenclock.run([*OBSERVE, "--pid", str(sleeper.pid), "-d", "500ms", "-o", str(out)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    forced = givenclock.run([*OBSERVE, "--pid", str(sleeper.pid), "-d", "500ms", "-o", str(out),
                             "--force"], capture_output=True, text=True, timeout=60, check=False)
    assert forced.returncode == 0, forced.stderr


def test_comm_target_finds_the_process(tmp_path):
    binary = build("rolesim")
    workload = subprocess.Popen([str(binary), "--hot", "1"])  # until terminated (by its PID)
    out = tmp_path / "c.duckdb"
    try:
        time.sleep(0.3)
        comm = procfs.process_comm(workload.pid)
        assert comm == "rolesim"
        result = givenclock.run([*OBSERVE, "--comm", comm, "-d", "1s", "-o", str(out)],
                                capture_output=True, text=True, timeout=60, check=False)
    finally:
        workload.terminate()
        workload.wait()
    assert result.returncode == 0, result.stderr
    with open_capture(out) as con:
        tgids, kind = con.execute("SELECT target_tgids, target_kind FROM capture").fetchall()[0]
    assert kind == "comm" and workload.pid in tgids


def test_cgroup_target(tmp_path):
    mount = procfs.cgroup2_mount()
    if mount is None or not os.access(mount, os.W_OK):
        pytest.skip("needs a writable cgroup v2 hierarchy to create a test cgroup")
    group = mount / f"threadwise-test-{os.getpid()}"
    group.mkdir()
    workload = subprocess.Popen(["sleep", "600"])  # killed by PID below; lives however slow observe starts
    out = tmp_path / "c.duckdb"
    try:
        (group / "cgroup.procs").write_text(str(workload.pid))
        result = givenclock.run([*OBSERVE, "--cgroup", f"/{group.name}", "-d", "1s", "-o", str(out)],
                                capture_output=True, text=True, timeout=60, check=False)
    finally:
        workload.kill()
        workload.wait()   # reaped: it has left the cgroup, which can now be removed
        group.rmdir()
    assert result.returncode == 0, result.stderr
    with open_capture(out) as con:
        tgids, kind = con.execute("SELECT target_tgids, target_kind FROM capture").fetchall()[0]
        cgroups = {r[0] for r in con.execute("SELECT DISTINCT cgroup FROM proc_snapshot").fetchall()}
    assert kind == "cgroup" and tgids == [workload.pid]
    assert cgroups == {f"/{group.name}"}


def test_every_bpftrace_script_parses():
    scripts = sorted(Path(__file__).resolve().parents[2].glob("observe/tracers/*.bt"))
    assert scripts
    help_text = subprocess.run(["bpftrace", "--help"], capture_output=True, text=True, check=False)
    has_dry_run = "--dry-run" in help_text.stdout + help_text.stderr
    for script in scripts:
        first = script.read_text().splitlines()[0]
        assert first.startswith(f"// {script.name} - "), f"{script.name}: header line names the tool"
        # bookworm's bpftrace 0.17 has no --dry-run; --emit-elf compiles without attaching
        command = (["bpftrace", "--dry-run", str(script)] if has_dry_run
                   else ["bpftrace", "--emit-elf", "/dev/null", str(script)])
        result = givenclock.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"{script.name}: {result.stderr}"
