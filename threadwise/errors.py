"""One error tree for the whole tool.

Library code raises a subclass of ThreadwiseError with a message that says what
went wrong and, where we know it, a hint that says what to do. The CLI turns it
into `error: ...` / `hint: ...` on stderr and the exit code of the class, so
scripts can tell bad input (2) from a failed operation (1).
"""

from __future__ import annotations


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
