"""Labs on one host take turns when the host has too few cores for all of them.

Problem: under multi-threaded TCG each vCPU is a host thread, and every lab claims the host
(hostpriority.py: its autogroup at nice -20), so two labs whose vCPUs outnumber the host's cores
compete as equals. Measured on a 2-core host (docs/lab.md "Two labs on one host"): each got about
one core, 38% of the demo lab's demand went unserved, its second attach of scx_layered did not
finish within 240 s and the demo failed, while the other lab's test timed out. Neither measured.

Approach: before it boots, a lab takes as many of the host's CPU *slots* (one per CPU this
process may run on) as it has vCPUs, at most all of them, and gives them back when its VM ends.
A slot is a file held with `flock`, so a lab that dies gives its slots back with it; the file
says who holds it (pid, what it runs, since when) for the waiter's message. Waiters queue by
ticket (a file named by the time it was taken and the waiter's pid), oldest first: a training
that boots VM after VM cannot starve a test that waits for its turn; a ticket whose process is
gone is removed by the next waiter. Slots live in /run/threadwise/lab-turns (host-wide among
root's labs) or, where that is not writable, in the cache. A waiter says once whom it waits
for, then once a minute. `THREADWISE_LAB_TURNS=off` boots at once (two labs on purpose: a
measurement of that case). A host with enough cores for both runs them side by side. A turn
taken inside another of the same process is free (it holds the slots already).

The test suite's ground-truth captures take the whole host's turn too (tests/conftest.py): a
lab beside them claims the host at nice -20 and starves the workload whose behaviour they
check, which then behaves otherwise (issue 32).

The wait does not count against the caller's alarm: a real-time interval timer armed when the
wait begins (pytest-timeout's signal method arms one per test) is stopped while it waits and
armed again with what was left once the turn is taken. A test's time limit then bounds its own
work, whatever queued before it: a canary lab test of a fresh clone's suite timed out after
30 min of waiting behind a 35-min training's VMs (2026-11-29), doing none of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from threadwise.paths import cache_dir
from threadwise.runtime.membership import thread_state

HOST_DIR = Path("/run/threadwise/lab-turns")
_HELD: dict[Path, int] = {}   # slots this process holds, per directory: a nested turn is free
POLL_S = 0.5
REMIND_S = 60.0
SWITCH = "THREADWISE_LAB_TURNS"


def turns_dir() -> Path:
    """/run/threadwise/lab-turns where it can be written (root), else the cache's lab-turns."""
    for candidate in (HOST_DIR, cache_dir() / "lab-turns"):
        try:
            (candidate / "queue").mkdir(parents=True, exist_ok=True)
            if os.access(candidate, os.W_OK):
                return candidate
        except OSError:
            continue
    raise OSError(f"neither {HOST_DIR} nor {cache_dir() / 'lab-turns'} can be written")


def host_slots() -> int:
    """The CPUs this process may run on: the lab's vCPU threads compete for these."""
    return len(os.sched_getaffinity(0))


def _alive(pid: int) -> bool:
    """A process that exists and has not exited (a zombie waits only for its parent's reap)."""
    return thread_state(pid, pid) not in ("", "Z")


def _tickets(queue: Path) -> list[Path]:
    """Live tickets, oldest first; the dead ones are removed on the way."""
    live = []
    for ticket in sorted(queue.iterdir(), key=lambda p: p.name):
        parts = ticket.name.split("-")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            continue
        if _alive(int(parts[1])):
            live.append(ticket)
        else:
            ticket.unlink(missing_ok=True)
    return live


def _try_take(directory: Path, slots: int, need: int, who: str) -> list[int] | None:
    """File descriptors of `need` slots, each locked and labelled with `who`, or None (none held)."""
    held: list[int] = []
    for index in range(slots):
        fd = os.open(directory / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, who.encode(), 0)
        held.append(fd)
        if len(held) == need:
            return held
    for fd in held:
        os.close(fd)
    return None


def holders(directory: Path, slots: int) -> list[str]:
    """Who holds the slots that are taken ("pid N: COMMAND since HH:MM"), one entry per lab."""
    found: list[str] = []
    for index in range(slots):
        path = directory / f"slot-{index}"
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                continue  # free
            except BlockingIOError:
                text = path.read_text().strip()
                if text and text not in found:
                    found.append(text)
        finally:
            os.close(fd)
    return found


def _who() -> str:
    # the command line as started (/proc), not sys.argv: under `python -m pytest` argv[0] is
    # pytest's __main__.py, which names nothing a user would recognise
    try:
        argv = Path("/proc/self/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        argv = []
    argv = argv or sys.argv
    command = " ".join(Path(arg).name if i == 0 else arg for i, arg in enumerate(argv))
    return f"pid {os.getpid()}: {command[:120]} since {time.strftime('%H:%M:%S')}"


@contextlib.contextmanager
def take_turn(vcpus: int, progress: Callable[[str], None], *, directory: Path | None = None,
              slots: int | None = None) -> Iterator[float]:
    """Hold `vcpus` of the host's CPU slots (at most all) while the block runs; yields how long
    it waited (s). Waits its turn, oldest ticket first, saying so. `directory` and `slots`
    default to the host's (turns_dir, host_slots)."""
    if os.environ.get(SWITCH, "on").lower() in ("off", "0", "no"):
        yield 0.0
        return
    try:
        directory = directory or turns_dir()
        (directory / "queue").mkdir(parents=True, exist_ok=True)
    except OSError as why:
        progress(f"lab: cannot take turns with other labs ({why}); booting at once")
        yield 0.0
        return
    slots = slots or host_slots()
    need = max(1, min(vcpus, slots))
    if _HELD.get(directory, 0) >= need:
        # this process has its turn already (a ground-truth capture that boots a lab): waiting
        # for itself would never end
        yield 0.0
        return
    ticket = directory / "queue" / f"{time.time_ns():020d}-{os.getpid()}"
    ticket.touch()
    started = time.monotonic()
    try:
        with _alarm_paused():
            held, said_so = _wait_for_slots(directory, ticket, slots, need, progress=progress)
    finally:
        ticket.unlink(missing_ok=True)
    waited_s = time.monotonic() - started
    if said_so:
        progress(f"lab: its turn after {waited_s:.0f} s")
    _HELD[directory] = _HELD.get(directory, 0) + len(held)
    try:
        yield waited_s
    finally:
        _HELD[directory] -= len(held)
        for fd in held:
            os.close(fd)


@contextlib.contextmanager
def _alarm_paused() -> Iterator[None]:
    """Stop a real-time interval timer for the block, and arm it again with what was left."""
    left, interval = signal.getitimer(signal.ITIMER_REAL)
    if left > 0:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _wait_for_slots(directory: Path, ticket: Path, slots: int, need: int, *,
                    progress: Callable[[str], None]) -> tuple[list[int], bool]:
    """The slots, once this ticket is the oldest and they are free, and whether it said it waited
    (whom for: at once, then once a minute)."""
    started = time.monotonic()
    told_at: float | None = None
    while True:
        queued = _tickets(directory / "queue")
        if ticket not in queued:  # removed under it (a cleaned /run): queue again, same place
            ticket.touch()
        elif queued[0] == ticket:
            held = _try_take(directory, slots, need, _who())
            if held is not None:
                return held, told_at is not None
        now = time.monotonic()
        if told_at is None or now - told_at >= REMIND_S:
            others = "; ".join(holders(directory, slots)) or "another lab, queued before this one"
            waited = "" if told_at is None else f" (waiting {(now - started) / 60:.0f} min)"
            progress(f"lab: waiting for its turn on this host's {slots} CPUs{waited}: {others}. "
                     f"Labs whose vCPUs outnumber the cores do not measure side by side "
                     f"(docs/lab.md \"Two labs on one host\"; {SWITCH}=off boots at once)")
            told_at = now
        time.sleep(POLL_S)
