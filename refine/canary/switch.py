"""The real switch: scx_layered with the profile under the runtime's supervisor, or the kernel's
default scheduler (nothing attached), with sysfs read back after every change."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.runtime import holder
from threadwise.runtime.config import ResolvedConfig
from threadwise.runtime.launcher import apply_background, prepare, stop
from threadwise.runtime.scx import sched_ext_state
from threadwise.runtime.state import RunFiles, read_state
from threadwise.shape import Shape


@dataclass
class LayeredSwitch:
    """`attach` starts the profile as `threadwise apply --background` does (the config is
    resolved and checked once, by `prepare`), held by this process: if the canary dies (even by
    SIGKILL) before a decision, the supervisor stops it (runtime/holder.py); `keep` releases it to
    its supervisor for good; `detach` stops it and confirms sysfs reads `disabled`
    (runtime.launcher.stop raises otherwise)."""

    profile: Path
    shape: Shape
    files: RunFiles
    attach_timeout_s: float = 120.0   # as `threadwise apply`'s
    _resolved: ResolvedConfig | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._resolved = prepare(self.profile, self.shape, self.files)

    def attach(self) -> None:
        assert self._resolved is not None
        apply_background(self._resolved, self.files, attach_timeout_s=self.attach_timeout_s,
                         held_by=os.getpid())

    def keep(self) -> None:
        holder.release(self.files)

    def detach(self) -> None:
        stop(self.files)

    def state(self) -> str:
        return sched_ext_state().state

    def ended_why(self) -> str | None:
        return ended_why(self.files)


def ended_why(files: RunFiles, wait_s: float = 20.0) -> str | None:
    """The supervisor's account of a run that ended on its own (state.json's exit: the kind and
    scx_layered's EXIT line, e.g. `error, exit status 1: EXIT: runtime error (RCU CPU stall on
    CPUs ())`), waited for up to `wait_s`: sysfs reads `disabling` before scx_layered has printed
    its exit and the supervisor has written it (seconds under TCG). None: nothing recorded."""
    deadline = time.monotonic() + wait_s
    while True:
        run = read_state(files)
        if run is not None and run.phase.ended and run.exit is not None:
            return run.exit.describe()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
