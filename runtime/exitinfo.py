"""Why scx_layered stopped: the exit kind, from its output and its exit status.

Problem: a scheduler can end in many ways (stopped by us, refused at load,
ejected by the kernel for an error or a stall, SysRq-S, killed), and a user
must be told which, with the scheduler's own words, never a bare "exited 1".

Approach: scx_utils' `UserExitInfo::report` prints `EXIT: <reason> (<msg>)`
where <reason> is the kernel's text for the `scx_exit_kind` (see
`scx_exit_reason()` in kernel/sched/ext.c), and an error exit makes the
program end with anyhow's `Error: ...` plus `Caused by:` lines. We map the
reason text back to the kind; with no EXIT line the kind comes from the exit
status (a signal: `killed`; an error before the scheduler ever attached:
`load_failure`). Pure functions; the supervisor supplies the text.
"""

from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass
from enum import StrEnum

from threadwise.scx import error_chain, strip_ansi

__all__ = ["CLEAN_KINDS", "REASONS", "ExitKind", "ExitReport", "classify", "error_chain", "strip_ansi"]


class ExitKind(StrEnum):
    """Why scx_layered stopped: the kernel's `scx_exit_kind`s, then the cases it never reports."""

    UNREG = "unreg"                  # unregistered from user space (a clean stop)
    UNREG_BPF = "unreg_bpf"          # unregistered from BPF
    UNREG_KERN = "unreg_kern"        # unregistered from the main kernel
    SYSRQ = "sysrq"                  # disabled by sysrq-S
    ERROR = "error"                  # runtime error (or an EXIT reason this list does not know)
    ERROR_BPF = "error_bpf"          # scx_bpf_error
    ERROR_STALL = "error_stall"      # runnable task stall: the watchdog ejected it
    KILLED = "killed"                # a signal ended scx_layered
    LOAD_FAILURE = "load_failure"    # it exited before attaching
    CRASHED = "crashed"              # it exited after attaching, without an EXIT line
    ATTACH_TIMEOUT = "attach_timeout"  # it did not attach within --attach-timeout (stopped)
    SUPERVISOR_LOST = "supervisor_lost"  # the supervisor vanished (SIGKILL) before reporting


# Kernel reason strings (kernel/sched/ext.c, scx_exit_reason) -> our kinds.
REASONS = {
    "unregistered from user space": ExitKind.UNREG,
    "unregistered from BPF": ExitKind.UNREG_BPF,
    "unregistered from the main kernel": ExitKind.UNREG_KERN,
    "disabled by sysrq-S": ExitKind.SYSRQ,
    "runtime error": ExitKind.ERROR,
    "scx_bpf_error": ExitKind.ERROR_BPF,
    "runnable task stall": ExitKind.ERROR_STALL,
}
CLEAN_KINDS = {ExitKind.UNREG, ExitKind.UNREG_BPF, ExitKind.UNREG_KERN}

_EXIT = re.compile(r"EXIT: (?P<reason>[^(\n]+?)(?: \((?P<msg>.*)\))?(?: on CPU (?P<cpu>\d+))?\s*$")


@dataclass(frozen=True)
class ExitReport:
    kind: ExitKind
    message: str  # the scheduler's own words (EXIT line, Error: chain), or ours
    returncode: int | None  # negative: killed by that signal (subprocess convention)
    attached: bool  # had the scheduler attached before it ended?

    @property
    def clean(self) -> bool:
        """Stopped on request: unregistered, exit status 0."""
        return self.kind in CLEAN_KINDS and self.returncode == 0

    def describe(self) -> str:
        status = ""
        if self.returncode is not None and self.returncode < 0:
            status = f", {signal.Signals(-self.returncode).name}"
        elif self.returncode:
            status = f", exit status {self.returncode}"
        return f"{self.kind}{status}: {self.message}"

    def to_json(self) -> dict:
        return {**asdict(self), "kind": self.kind.value}

    def __post_init__(self) -> None:
        # read back from a state file as a plain string: the enum again (an unknown kind raises)
        object.__setattr__(self, "kind", ExitKind(self.kind))


def classify(output: str, returncode: int | None, *, attached: bool) -> ExitReport:
    """The exit report for scx_layered's combined stdout/stderr and exit status."""
    text = strip_ansi(output)
    matches = [m for line in text.splitlines() if (m := _EXIT.search(line))]
    if matches:
        last = matches[-1]
        reason = last.group("reason").strip()
        kind = REASONS.get(reason, ExitKind.ERROR)
        message = f"EXIT: {reason}" + (f" ({last.group('msg')})" if last.group("msg") else "")
        if last.group("cpu"):
            message += f" on CPU {last.group('cpu')}"
        return ExitReport(kind, message, returncode, attached)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return ExitReport(ExitKind.KILLED, f"scx_layered was killed by {name}", returncode, attached)
    chain = error_chain(text)
    if not attached:
        return ExitReport(
            ExitKind.LOAD_FAILURE, chain or "scx_layered exited before attaching", returncode, attached
        )
    return ExitReport(ExitKind.CRASHED, chain or "scx_layered exited without an EXIT line", returncode,
                      attached)
