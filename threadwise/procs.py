"""A process's identity: its pid plus its start time, so a reused pid is never mistaken for it.

Every file threadwise leaves while it runs (the runtime's state, a capture being written, an
observe work directory) records its owner as (pid, start time). A later run can then tell a
live owner from a dead one whose pid the kernel has since given to someone else.
"""

from __future__ import annotations

import os
from pathlib import Path


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot): a pid's identity.

    None when the process is gone, or a zombie: an orphaned process is reparented to init,
    and a minimal init (the lab VM's) may never reap it.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_alive_and_ours(pid: int | None, start: int | None) -> bool:
    return bool(pid) and start is not None and proc_start_time(int(pid)) == start


def me() -> tuple[int, int]:
    """(pid, start time) of this process."""
    pid = os.getpid()
    start = proc_start_time(pid)
    assert start is not None
    return pid, start
