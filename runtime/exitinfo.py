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

from threadwise.scx import error_chain, strip_ansi

__all__ = ["CLEAN_KINDS", "REASONS", "ExitReport", "classify", "error_chain", "strip_ansi"]

# Kernel reason strings (kernel/sched/ext.c, scx_exit_reason) -> our kind names.
REASONS = {
    "unregistered from user space": "unreg",
    "unregistered from BPF": "unreg_bpf",
    "unregistered from the main kernel": "unreg_kern",
    "disabled by sysrq-S": "sysrq",
    "runtime error": "error",
    "scx_bpf_error": "error_bpf",
    "runnable task stall": "error_stall",
}
CLEAN_KINDS = {"unreg", "unreg_bpf", "unreg_kern"}

_EXIT = re.compile(r"EXIT: (?P<reason>[^(\n]+?)(?: \((?P<msg>.*)\))?(?: on CPU (?P<cpu>\d+))?\s*$")


@dataclass(frozen=True)
class ExitReport:
    kind: str  # one of REASONS' values, or killed / load_failure / crashed / attach_timeout
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
        return asdict(self)


def classify(output: str, returncode: int | None, *, attached: bool) -> ExitReport:
    """The exit report for scx_layered's combined stdout/stderr and exit status."""
    text = strip_ansi(output)
    matches = [m for line in text.splitlines() if (m := _EXIT.search(line))]
    if matches:
        last = matches[-1]
        reason = last.group("reason").strip()
        kind = REASONS.get(reason, "error")
        message = f"EXIT: {reason}" + (f" ({last.group('msg')})" if last.group("msg") else "")
        if last.group("cpu"):
            message += f" on CPU {last.group('cpu')}"
        return ExitReport(kind, message, returncode, attached)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return ExitReport("killed", f"scx_layered was killed by {name}", returncode, attached)
    chain = error_chain(text)
    if not attached:
        return ExitReport(
            "load_failure", chain or "scx_layered exited before attaching", returncode, attached
        )
    return ExitReport("crashed", chain or "scx_layered exited without an EXIT line", returncode, attached)
