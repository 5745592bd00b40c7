"""One error tree for the whole tool, and the exit code of each branch.

Library code raises a subclass of ThreadwiseError with a message that says what
went wrong and, where we know it, a hint that says what to do. The CLI turns it
into `error: ...` / `hint: ...` on stderr and the exit code of the class, so a
script can tell what happened from the code alone. Every error class of every
stage lives here (and nowhere else), so this table is complete:

| code | class                | meaning |
|------|----------------------|---------|
| 0    |                      | done, nothing to report |
| 1    | ThreadwiseError      | an operation failed (and Python's own crash status) |
| 1    | SchedulerFailure     | scx_layered did not attach, or ended on its own |
| 1    | StatsUnavailable     | scx_layered's stats socket did not answer |
| 1    | LabError             | the lab VM did not run the command to completion |
| 1    | DownloadError        | the Debian archive could not be reached or sent junk |
| 1    | LadderIncomplete     | a ladder's agent stopped before its last cell (what ran is kept) |
| 1    | InitramfsError       | a ladder plan cannot be packed into the self-contained lab guest |
| 1    | MembershipUnavailable| scx_layered's tid -> layer map could not be read |
| 2    | UsageError           | a bad option or path |
| 2    | InputError           | a malformed input file (ProfileError: a profile; WorkloadError: |
|      |                      | a workload file; MetricsError: a load generator's output)        |
| 3    | TargetError          | the workload to observe is missing or vanished |
| 3    | ServiceError         | a workload's service did not start or become ready |
| 4    | PermissionProblem    | not root / missing capabilities |
| 5    | MissingTool          | a program or kernel feature is missing |
| 6    | TracerError          | the tracer failed while running |
| 7    | FindingsReported     | the check ran and found problems (e.g. `lint`) |
| 8    | ConfigRefused        | scx_layered refused a layer config, or dropped an option of it |
| 9    | GuestCommandFailed   | `lab run`: the guest command exited non-zero (its status is printed) |
| 10   | LabTimeout           | `lab run`: the VM did not finish within --timeout and was stopped |

Findings (7) are results, not failures: a caller such as `demo` may go on after
them, never after 1. An uncaught Python exception also exits 1, which is why
findings need a code of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol


class ThreadwiseError(Exception):
    """Base of every error threadwise reports to a user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(ThreadwiseError):
    """The user asked for something that cannot work (bad option, bad path)."""

    exit_code = 2


class InputError(ThreadwiseError):
    """An input file is malformed; the message names the file (and line)."""

    exit_code = 2


class TargetError(ThreadwiseError):
    """The workload to observe cannot be found or vanished."""

    exit_code = 3


class PermissionProblem(ThreadwiseError):
    """Missing privileges or capabilities (eBPF, tracefs, sched_ext)."""

    exit_code = 4


class MissingTool(ThreadwiseError):
    """A required external program or kernel feature is not available."""

    exit_code = 5


class TracerError(ThreadwiseError):
    """The tracer failed while running."""

    exit_code = 6


class FindingsReported(ThreadwiseError):
    """A check ran to completion and found problems; they were printed as its result."""

    exit_code = 7


class ConfigRefused(ThreadwiseError):
    """scx_layered's own parser (`--print-and-exit`) refused a layer config or changed it.

    The same code whichever command asked (`compile --check`, `apply`, refine):
    nothing was attached.
    """

    exit_code = 8


class SchedulerFailure(ThreadwiseError):
    """scx_layered did not attach, or it ended without being asked to."""


class StatsUnavailable(ThreadwiseError):
    """scx_layered's stats server did not answer."""


class LabError(ThreadwiseError):
    """The lab VM did not run the command to completion."""


class DownloadError(ThreadwiseError):
    """The Debian archive could not be reached or sent something wrong."""


class GuestCommandFailed(ThreadwiseError):
    """The command ran in the lab and exited non-zero.

    `lab run` exits 9 then, whatever the guest's status was, so that a guest
    status of 2..8 is never mistaken for one of threadwise's own codes; the
    guest's status is printed on stderr (`lab: guest exit status N`) and kept
    in the results directory (`status`).
    """

    exit_code = 9

    def __init__(self, status: int, result_dir: Path, console_log: Path | None) -> None:
        super().__init__(
            f"the command in the lab exited with status {status}",
            hint=f"results in {result_dir}" + (f", console log {console_log}" if console_log else ""),
        )
        self.status = status


class LabTimeout(LabError):
    """The lab VM did not finish within its timeout; it was stopped (every process it started).

    A code of its own (10), so a script can tell "too slow, raise --timeout"
    from a guest command that failed (9) or a VM that never ran (1).
    """

    exit_code = 10


class Problem(Protocol):
    """What ProfileError needs of one diagnostic (threadwise.diagnostics.Diagnostic)."""

    @property
    def rule(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def hint(self) -> str | None: ...
    @property
    def severity(self) -> str: ...
    @property
    def line(self) -> int | None: ...
    def location(self) -> str: ...


class ProfileError(InputError):
    """A profile cannot be read or is invalid; carries every diagnostic found."""

    def __init__(self, file: str, diagnostics: Sequence[Problem]) -> None:
        self.diagnostics = list(diagnostics)
        bad = [d for d in self.diagnostics if d.severity == "error"] or self.diagnostics
        first = bad[0]
        if len(bad) == 1:
            message = f"{first.location()}: {first.message} [{first.rule}]"
            hint = first.hint
        else:
            message = f"{file}: {len(bad)} problems (first: line {first.line}: {first.message})"
            hint = "run `threadwise validate` on the file to see each problem"
        super().__init__(message, hint=hint)


class WorkloadError(InputError):
    """A workload file cannot be read or is invalid; carries every diagnostic found."""

    def __init__(self, diagnostics: Sequence[Problem]) -> None:
        self.diagnostics = list(diagnostics)
        message = "\n".join(f"{d.location()}: {d.message}" for d in diagnostics)
        hints = [d.hint for d in diagnostics if d.hint]
        if len(diagnostics) == 1:
            hint = diagnostics[0].hint
        else:
            hint = "\n".join(f"line {d.line}: {d.hint}" for d in diagnostics if d.hint) or None
        super().__init__(message, hint=hint if hints else None)


class MetricsError(InputError, ValueError):
    """A load generator's output holds no metric we can read, or lacks one that is needed.

    Also a ValueError: callers that treat unreadable output like any malformed
    value (a cell's `load` reason) catch it as one.
    """


class ServiceError(ThreadwiseError):
    """The workload's service did not start or did not become ready."""

    exit_code = 3


class InitramfsError(ThreadwiseError):
    """The plan cannot be packed into a self-contained guest."""


# --- the image: a newc cpio built in memory order, parents before children ---------------------


class HintError(ThreadwiseError):
    """A task's hint could not be written to or read from scx_layered's task-hint map
    (runtime/hints.py): the task and the reason. The supervisor logs it and goes on."""


class MembershipUnavailable(ThreadwiseError):
    """The tid -> layer map could not be read."""


class NothingMeasured(ThreadwiseError):
    """Training measured too few valid cells for the statistics: no profile was written."""

    exit_code = 11


class KeepDefault(ThreadwiseError):
    """Training measured no profile that beats the kernel's default scheduler: the record says
    "keep the default scheduler for this service"; no profile to apply was written."""

    exit_code = 12


class CanaryRolledBack(ThreadwiseError):
    """`canary`: the profile was rolled back (worse beyond a margin, a guard fired, or no decision
    by --max-duration); the host is on the kernel's default scheduler and the record says why."""

    exit_code = 13


class LadderIncomplete(ThreadwiseError):
    """A ladder stopped before its last cell; the cells that finished are stored."""
