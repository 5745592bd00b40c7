"""The guest agent as the host sees it: where its files are, and what a run of it gives back.

Problem: the ladder (refine) writes a run directory and runs the agent on it on this host, in
the vng lab or in the initramfs guest; each way must hand back the same account of the run, and
the initramfs guest (runtime) must not import refine to give it.

Approach: the agent's and the guest init's paths (package data in `guest/`) and `Execution` live
here, in the lab, below refine: every guest returns an `Execution`, and refine's ladder imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

GUEST = "threadwise.runtime.lab"
# The console line of multi-threaded TCG's code-patching race (docs/lab.md): the kernel's
# int3-based text patching (static keys flip when sched_ext is enabled or disabled) oopses.
# The emulator's, not the command's: the guests retry a boot that died of it (vng.py,
# initramfs.py), and a training runs a step's or the screen's ladder once more
# (refine/search/step_ladders.py).
TCG_PATCHING_OOPS = "Oops: int3"


def emulation_failure(console_text: str, markers: tuple[str, ...]) -> str | None:
    """The first of a guest's known emulation failures (`markers`) its console shows, or None:
    what makes a failed boot worth one more try (vng.py, initramfs.py)."""
    return next((marker for marker in markers if marker in console_text), None)


def agent_path() -> Path:
    """guest/agent.sh: the POSIX sh agent that runs a plan's cells (any guest, or this host)."""
    return Path(str(resources.files(GUEST).joinpath("guest", "agent.sh")))


def init_path() -> Path:
    """guest/init: the initramfs guest's PID 1 (busybox sh)."""
    return Path(str(resources.files(GUEST).joinpath("guest", "init")))


@dataclass(frozen=True)
class Execution:
    """Where the cells ran and how the run ended."""

    guest_kernel: str | None
    vcpus: int
    tcg: bool
    wall_s: float
    status: int  # the agent's exit status (0: every step ran)
    host_priority: str | None = None  # what the lab claimed of the host (hostpriority.py; None: no lab)
    stopped_by_host: str | None = None  # why the host ended the run before its plan did (early stop)
