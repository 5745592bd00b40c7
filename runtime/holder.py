"""A scheduler on trial: held by the process judging it, stopped if that process dies undecided.

Problem: `threadwise canary` attaches a profile that nobody has judged yet, under the same
detached supervisor `apply --background` uses (so a kept profile outlives the canary). If the
canary is SIGKILLed (an OOM kill, a CI timeout, `kill -9`), it cannot roll back, and the
supervisor would keep the unjudged profile attached for good.

Approach: while it judges, the canary *holds* the run: `<run dir>/holder.json` names its pid and
start time (the pid's identity: a recycled pid is not the holder). The supervisor reads the file
in its wait and watch loops; when the file names a process that is gone, it stops scx_layered as
if asked to (the default scheduler returns). A kept profile is *released* (the file removed), and
from then on the supervisor answers to nobody but `threadwise stop`, as after `apply`.
"""

from __future__ import annotations

import json

from threadwise.procs import is_alive_and_ours, proc_start_time
from threadwise.runtime.state import RunFiles, write_json


def hold(files: RunFiles, pid: int) -> None:
    """Make `pid` the run's holder (written before the supervisor starts, so no gap)."""
    write_json(files.holder, {"pid": pid, "start": proc_start_time(pid)})


def release(files: RunFiles) -> None:
    """The profile is no longer on trial: its supervisor keeps it until `threadwise stop`."""
    files.holder.unlink(missing_ok=True)


def holder_gone(files: RunFiles) -> str | None:
    """Why the run must stop (its holder ended), or None: not held, or held by a live holder."""
    try:
        held = json.loads(files.holder.read_text())
        pid, start = int(held["pid"]), held["start"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return f"{files.holder} is unreadable: a trial nobody can vouch for"
    if is_alive_and_ours(pid, start):
        return None
    return f"the process that held the profile on trial (pid {pid}) ended without a decision"
