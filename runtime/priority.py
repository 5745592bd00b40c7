"""scx_layered loads at nice -20 and runs at nice 0.

Problem: attaching scx_layered is mostly the kernel verifying its BPF programs, CPU-bound work
done in scx_layered's own thread. On a busy machine (the service a profile is for, a canary's
background) that thread competes at nice 0 with every runnable thread. In the lab (TCG, 2 vCPUs,
beside rolesim and two spinners, one boot, nice 0 and -20 alternated ABBA twice) attaches took
59, 36, 43 and 47 s at nice 0 and 27, 22, 31 and 32 s at nice -20 (docs/lab.md "Measured
timings").

Approach: the child is started at nice -20 (`load_at_high_priority`, between fork and exec).
Once the kernel reports it attached, every thread of it goes to nice 0 (`run_at_normal`), and
the supervisor repeats that for the first seconds after (`RESTORE_FOR_S`): a thread created
while the first pass ran was born at -20. The detached supervisor itself runs at nice 0 too
(`supervise_at_normal`). So once attached, scx_layered and its supervisor run at nice 0,
the priority of a service, whatever the nice of the command that applied the profile. Without
the privilege to change a priority (not root) each keeps the one it was born with.
"""

from __future__ import annotations

import contextlib
import os

LOAD_NICE = -20
RUN_NICE = 0
# scx_layered 1.1.4 starts its threads during init and its first --interval step
RESTORE_FOR_S = 10.0


def load_at_high_priority() -> None:
    """Runs in the child between fork and exec: its nice to LOAD_NICE, if allowed."""
    with contextlib.suppress(OSError):   # not root: it loads at the caller's priority
        os.setpriority(os.PRIO_PROCESS, 0, LOAD_NICE)


def supervise_at_normal() -> None:
    """This process (the detached supervisor) to RUN_NICE, if allowed."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, RUN_NICE)


def nice_of(pid: int) -> int | None:
    """The nice of `pid`'s main thread, or None once it has gone."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def run_at_normal(pid: int) -> None:
    """Every thread of `pid` to RUN_NICE (one already there is set again: harmless)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:   # it has gone
        return
    for tid in tids:
        # it ended, or we may not: it keeps the priority it was born with
        with contextlib.suppress(OSError, ValueError):
            os.setpriority(os.PRIO_PROCESS, int(tid), RUN_NICE)
