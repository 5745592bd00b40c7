"""The lab's claim on the host (runtime/lab/hostpriority.py), on real processes of this host.

A child started in a session of its own, as the lab starts qemu, stands in for qemu: the claim
must reach its autogroup and every thread of its session, including threads started after the
claim (qemu's vCPUs appear a moment after qemu starts), and must say so in one sentence; where
the host refuses (not root), it must say that instead and change nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import stop_by_pid
from threadwise.runtime.lab import hostpriority
from threadwise.runtime.lab.hostpriority import LAB_NICE, OFF, HostClaim

# A process that starts one more thread 1.5 s after it starts, then idles: like qemu, whose vCPU
# threads appear after the process does.
LATE_THREAD = """
import threading, time
time.sleep(1.5)
threading.Thread(target=time.sleep, args=(600,), name="late").start()
time.sleep(600)
"""


def _nice(tid: int) -> int:
    stat = Path(f"/proc/{tid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[16])  # field 19, nice


def _thread_nices(pid: int) -> dict[int, int]:
    """tid -> nice of the process's threads; a thread that ends while they are read is left out
    (a pytest process's helper threads come and go: one did between the listing and its stat)."""
    nices = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            nices[int(task.name)] = _nice(int(task.name))
    return nices


def _wait_threads(pid: int, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(Path(f"/proc/{pid}/task").iterdir())) < count:
        assert time.monotonic() < deadline, f"process {pid} never had {count} threads"
        time.sleep(0.05)


@pytest.fixture
def session_child() -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", LATE_THREAD], start_new_session=True)
    yield child
    stop_by_pid(child)


def test_session_threads_lists_the_whole_session(session_child: subprocess.Popen[bytes]) -> None:
    _wait_threads(session_child.pid, 2)
    assert set(hostpriority.session_threads(session_child.pid)) == {
        int(t.name) for t in Path(f"/proc/{session_child.pid}/task").iterdir()}
    assert hostpriority.session_threads(os.getpid()) == [] or os.getsid(0) == os.getpid()


@pytest.mark.skipif(os.geteuid() != 0, reason="claiming the host needs root: run the tests as root")
def test_claim_reaches_the_autogroup_and_late_threads(session_child: subprocess.Popen[bytes]) -> None:
    pid = session_child.pid
    in_effect, why_not = hostpriority.autogroups_in_effect(pid)
    ours = _thread_nices(os.getpid())
    with HostClaim(pid, period_s=0.1) as claim:
        assert f"threads at nice {LAB_NICE}" in claim.applied
        _wait_threads(pid, 2)
        deadline = time.monotonic() + 10
        while set(_thread_nices(pid).values()) != {LAB_NICE}:
            assert time.monotonic() < deadline, f"threads not reniced: {_thread_nices(pid)}"
            time.sleep(0.05)
    if in_effect:
        assert f"autogroup at nice {LAB_NICE}" in claim.applied
        assert Path(f"/proc/{pid}/autogroup").read_text().split()[-1] == str(LAB_NICE)
    else:
        assert why_not in claim.applied
    # the claim is the lab session's alone: our own threads keep their nice
    assert {tid: nice for tid, nice in _thread_nices(os.getpid()).items() if tid in ours} == \
        {tid: nice for tid, nice in ours.items() if tid in _thread_nices(os.getpid())}


def test_off_changes_nothing(session_child: subprocess.Popen[bytes]) -> None:
    before = _thread_nices(session_child.pid)
    with HostClaim(session_child.pid, enabled=False) as claim:
        time.sleep(0.2)
    assert claim.applied == OFF
    assert set(_thread_nices(session_child.pid).values()) == set(before.values())


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_a_refused_claim_says_so_and_changes_nothing(session_child: subprocess.Popen[bytes]) -> None:
    """As an unprivileged user (a forked child that drops to nobody), nothing is claimed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, claim, report the sentence
        try:
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            with HostClaim(session_child.pid) as claim:
                pass
            os.write(write, claim.applied.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as stream:
        applied = stream.read()
    assert applied.startswith("refused: "), applied
    assert "root" in applied
    assert LAB_NICE not in _thread_nices(session_child.pid).values()


def test_autogroups_in_effect_reads_the_cpu_cgroup(tmp_path: Path) -> None:
    def proc_with(cgroup: str) -> Path:
        (tmp_path / "7").mkdir(exist_ok=True)
        (tmp_path / "7" / "cgroup").write_text(cgroup)
        return tmp_path

    assert hostpriority.cpu_cgroup(7, proc_with("2:cpuacct:/\n1:cpu:/\n0::/\n")) == "/"
    assert hostpriority.cpu_cgroup(7, proc_with("3:cpu,cpuacct:/lab\n0::/user.slice\n")) == "/lab"
    assert hostpriority.cpu_cgroup(7, proc_with("0::/user.slice/session-1.scope\n")) == \
        "/user.slice/session-1.scope"
    if hostpriority.AUTOGROUP_SWITCH.read_text().strip() == "1":
        in_effect, why = hostpriority.autogroups_in_effect(7, proc_with("0::/user.slice\n"))
        assert not in_effect and "/user.slice" in why
        assert hostpriority.autogroups_in_effect(7, proc_with("1:cpu:/\n0::/\n")) == (True, "")
