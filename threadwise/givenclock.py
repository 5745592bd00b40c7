"""The time the host gave a process tree: wall time minus the time its threads waited for a CPU.

Problem: guards against hangs (a tracer that never attaches, a capture that never ends, a
command that never returns) were wall-clock deadlines sized for a merely busy host. Beside a lab
VM that claims the host (its qemu at autogroup nice -20 while it measures, docs/lab.md "The lab
on a busy host"), the processes of a test or a capture wait on a run queue most of the time:
measured in a fresh clone's `make test` beside lab ladders, bpftrace did not attach within
observe's 60 s and a 90-s Redis capture was not done within its test's 120-s guard. The
processes were working as fast as the host let them; the guard could not tell that from a hang.

Approach: charge a wait only with what the host gave. The kernel counts, per thread, the time
it spent runnable but waiting for a CPU (schedstat's second field, `run_delay`, ns). A
`GivenClock` follows a process and its descendants (by the parent pid in /proc/PID/stat) and
keeps the growth of every thread's run_delay it has seen, ended threads included (their last
reading is kept). The tree was held back at least as long as its most-delayed thread: given
time = wall time - that largest wait. On a quiet host the two clocks agree; a process held back
90% of the time is charged a tenth of the wall time; a VM whose two vCPU threads each waited
half the time, half (a sum over threads would charge it nothing). A chain of processes that
wait one after another is credited only its longest wait, so a guard still fires on a starved
chain, later; and every guard has a wall-clock cap (`cap_s`): a starved tree gets longer, not
forever. `run` and `communicate` are subprocess's with that guard; `Deadline` serves a polling
wait.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
# a guard may stretch to this many times its given-time bound in wall time, no further
DEFAULT_CAP_FACTOR = 10.0


def _run_delay_ns(pid: int, tid: int) -> int | None:
    try:
        fields = (PROC / str(pid) / "task" / str(tid) / "schedstat").read_text().split()
    except OSError:
        return None
    return int(fields[1]) if len(fields) >= 2 else None


def _parents() -> dict[int, list[int]]:
    """ppid -> child pids of every process (/proc/PID/stat field 4): one pass over /proc for the
    whole tree, where the kernel's own lists (/proc/PID/task/TID/children) hold only the children
    each thread forked and take a read per thread of every process in it."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_threads(root: int) -> list[tuple[int, int]]:
    """(pid, tid) of every thread of `root` and its descendants alive now."""
    children = _parents()
    threads: list[tuple[int, int]] = []
    pending, seen = [root], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            threads += [(pid, int(tid)) for tid in os.listdir(PROC / str(pid) / "task")]
        except OSError:
            continue
        pending += children.get(pid, [])
    return threads


@dataclass
class GivenClock:
    """Seconds of host time given to a process tree since the clock started."""

    root: int
    now: Callable[[], float] = time.monotonic
    started: float = 0.0
    baseline: dict[int, int] = field(default_factory=dict)  # tid -> run_delay at first sight
    latest: dict[int, int] = field(default_factory=dict)  # tid -> its last reading

    def __post_init__(self) -> None:
        self.started = self.now()
        for pid, tid in tree_threads(self.root):
            delay = _run_delay_ns(pid, tid)
            if delay is not None:
                self.baseline[tid] = self.latest[tid] = delay

    def sample(self) -> None:
        """Read the tree's threads again (call it while the tree lives: an ended thread's last
        run-queue wait is only known from a reading taken before it ended)."""
        for pid, tid in tree_threads(self.root):
            delay = _run_delay_ns(pid, tid)
            if delay is not None:
                self.baseline.setdefault(tid, 0)  # born after the start: all its waiting counts
                self.latest[tid] = delay

    def wall_s(self) -> float:
        return self.now() - self.started

    def waited_s(self) -> float:
        """The longest run-queue wait of one of the tree's threads since the start, as last sampled."""
        return max((self.latest[tid] - self.baseline[tid] for tid in self.latest), default=0) / 1e9

    def given_s(self) -> float:
        wall = self.wall_s()
        return max(0.0, wall - min(self.waited_s(), wall))


@dataclass
class Deadline:
    """A bound on given time (`bound_s`) with a wall-clock cap, for a polling wait on `root`."""

    clock: GivenClock
    bound_s: float
    cap_s: float
    every_s: float = 0.25  # a reading walks /proc: at most this often
    _sampled: float = float("-inf")

    @classmethod
    def start(cls, root: int, bound_s: float, cap_factor: float = DEFAULT_CAP_FACTOR) -> Deadline:
        return cls(GivenClock(root), bound_s, bound_s * cap_factor)

    def passed(self) -> bool:
        if self.clock.now() - self._sampled >= self.every_s:
            self.clock.sample()
            self._sampled = self.clock.now()
        return self.clock.given_s() > self.bound_s or self.clock.wall_s() > self.cap_s

    def describe(self) -> str:
        """What the wait took, for a timeout's message."""
        return (f"{self.clock.given_s():.0f} s of host time given ({self.clock.wall_s():.0f} s wall, "
                f"{self.clock.waited_s():.0f} s waiting for a CPU)")


def communicate(proc: subprocess.Popen[Any], *, timeout: float, input: str | bytes | None = None,
                cap_factor: float = DEFAULT_CAP_FACTOR, poll_s: float = 0.5) -> tuple[Any, Any]:
    """proc.communicate() whose `timeout` counts the host time given to proc's tree (wall time at
    most `cap_factor` times that). On expiry the child is killed and TimeoutExpired raised."""
    deadline = Deadline.start(proc.pid, timeout, cap_factor)
    pending_input = input
    while True:
        try:
            return proc.communicate(pending_input, timeout=poll_s)
        except subprocess.TimeoutExpired:
            pending_input = None  # communicate() keeps what it has sent and read
            if deadline.passed():
                proc.kill()
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None


def wait(proc: subprocess.Popen[Any], *, timeout: float, cap_factor: float = DEFAULT_CAP_FACTOR,
         poll_s: float = 0.2) -> int:
    """proc.wait() whose `timeout` counts the host time given to proc's tree; TimeoutExpired
    (the process left running, as Popen.wait leaves it) when it passes."""
    deadline = Deadline.start(proc.pid, timeout, cap_factor)
    while True:
        try:
            return proc.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            if deadline.passed():
                raise subprocess.TimeoutExpired(proc.args, timeout) from None


def run(argv: Sequence[str], *, timeout: float, cap_factor: float = DEFAULT_CAP_FACTOR,
        input: str | bytes | None = None, check: bool = False, capture_output: bool = False,
        **popen: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run whose `timeout` counts the time the host gave the command's process tree
    (`communicate`)."""
    if capture_output:
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    with subprocess.Popen(list(argv), **popen) as proc:
        out, err = communicate(proc, timeout=timeout, input=input, cap_factor=cap_factor)
    done = subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
