"""The run directory and the typed state of the applied profile (`state.json`).

Problem: the supervisor writes the run's state, `apply` waits on it, `status`
and `stop` read it, `display` prints it, and refine's lab agent and the lab
tests read the file itself. As a dict of string keys, a typo in any of them
would silently read as "absent".

Approach: `RunState` (one dataclass, a `Phase` enum) is the only way the
runtime touches the state; `read_state` / `write_state` convert it to and
from the JSON file, whose keys are exactly the field names (docs/interfaces.md:
Runtime). A field that was never set (None) is left out of the file, so, for
example, `attached_at` appears only once scx_layered has attached. The file is
written atomically (temp file, rename).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from threadwise.runtime.exitinfo import ExitReport


class Phase(StrEnum):
    """Where a run is: starting -> attached -> stopping -> stopped | failed."""

    STARTING = "starting"    # scx_layered launched, not attached yet
    ATTACHED = "attached"    # sysfs: state enabled, root/ops layered_*
    STOPPING = "stopping"    # asked to stop (signal or --duration)
    STOPPED = "stopped"      # ended as asked, cleanly
    FAILED = "failed"        # did not attach, or ended on its own

    @property
    def active(self) -> bool:
        """A supervisor should be alive and owning scx_layered."""
        return self in (Phase.STARTING, Phase.ATTACHED, Phase.STOPPING)

    @property
    def ended(self) -> bool:
        return self in (Phase.STOPPED, Phase.FAILED)


@dataclass(frozen=True)
class RunFiles:
    """The run directory of the (single) applied profile."""

    root: Path

    @classmethod
    def default(cls) -> RunFiles:
        return cls(Path(os.environ.get("THREADWISE_RUN_DIR", "/run/threadwise")))

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "scx_layered.log"

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def supervisor_log(self) -> Path:
        return self.root / "supervisor.log"

    @property
    def holder(self) -> Path:
        """The process that holds a profile on trial (holder.py); absent once it is kept."""
        return self.root / "holder.json"

    @property
    def hints(self) -> Path:
        """What the supervisor hints by process title (hints.py's HintPlan); absent: nothing."""
        return self.root / "hints.json"

    @property
    def run_counts(self) -> Path:
        """tid -> run count of the target threads at the last re-match (membership.py)."""
        return self.root / "run-counts.json"


@dataclass
class RunState:
    """Everything recorded about one run (the keys of state.json)."""

    phase: Phase
    source: str = ""                      # the profile or config the user named
    config: str = ""                      # the compiled config.json scx_layered runs with
    supervisor_pid: int | None = None
    supervisor_start: int | None = None   # /proc/PID/stat start time: the pid's identity
    started_at: float | None = None       # wall clock (time.time())
    started_uptime: float | None = None   # /proc/uptime then (kernel log lines since)
    scx_pid: int | None = None
    scx_start: int | None = None
    scx_binary: str | None = None
    ops: str | None = None                # sysfs root/ops once attached
    attached_at: float | None = None
    attach_s: float | None = None         # launch to attach, seconds
    attach_timeout: bool | None = None    # True: not attached in time, stopped
    stop_signal: str | None = None        # the signal that asked the supervisor to stop
    stop_reason: str | None = None        # why it stopped unasked-for by a user (holder.py)
    stop_requested: bool | None = None
    ended_at: float | None = None
    exit: ExitReport | None = None        # why scx_layered ended (exitinfo.py)
    state_after: str | None = None        # sysfs state once it ended
    ops_after: str | None = None
    kernel_log: list[str] | None = None   # sched_ext kernel log lines of a failed run
    hint_map: str | None = None           # where this run's task-hint map is pinned (hints.py)
    hinted: int | None = None             # processes hinted by title so far
    extra: dict[str, Any] = field(default_factory=dict)   # keys of a newer threadwise, kept as read

    @property
    def ended_by_itself(self) -> bool:
        return self.phase is Phase.FAILED

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or value is None:
                continue
            out[f.name] = value.to_json() if isinstance(value, ExitReport) else value
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunState:
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in raw.items() if k in names}
        known["phase"] = Phase(known["phase"])
        if known.get("exit") is not None:
            known["exit"] = ExitReport(**known["exit"])
        return cls(**known, extra={k: v for k, v in raw.items() if k not in names})


def read_state(files: RunFiles) -> RunState | None:
    """The recorded state, or None when there is none (or it cannot be read)."""
    try:
        return RunState.from_json(json.loads(files.state.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """A run-dir file, written whole or not at all: the supervisor reads these while they change."""
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(data, indent=2) + "\n")
    temp.replace(path)


def write_state(files: RunFiles, state: RunState) -> None:
    write_json(files.state, state.to_json())
