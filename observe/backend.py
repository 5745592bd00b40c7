"""Tracer backends: the interface every tracer implements, and the helpers they share.

A backend starts tracing, hands back parsed Arrow batches when polled, and on
stop reports what the kernel counted and what was lost. Ingest (capture.py)
only sees this interface, so a second backend (the libbpf tracer) plugs in by
implementing it and registering in backends.py's BACKENDS, which picks one
(above the backends, so none of them imports its chooser).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from threadwise.errors import TracerError
from threadwise.givenclock import Deadline
from threadwise.observe.stream import ParsedChunk

if TYPE_CHECKING:
    from threadwise.observe.store import CaptureWriter


@dataclass
class TracerReport:
    """What a backend knows once tracing has stopped."""

    end_ts: int | None              # when the kernel side stopped (None if never confirmed)
    stop_requested_ts: int | None = None   # when the observer asked it to stop
    kernel_counts: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] | None = None   # exact per-kind ring drops (libbpf); None: not countable
    missed: dict[str, int] | None = None    # per kind: events a program never ran for (recursion guard)
    unparsed: int = 0               # lines the parser did not understand
    unparsed_samples: list[str] = field(default_factory=list)
    stderr_tail: str = ""


@dataclass
class TaskActivity:
    """Task births and renames a backend recorded since it was last asked (what observe's /proc
    scans follow: a scan can only find something new after a task was born or renamed)."""

    parent_tgids: set[int] = field(default_factory=set)   # the creators' thread groups
    comms: set[str] = field(default_factory=set)          # names born with, or renamed to

    def __bool__(self) -> bool:
        return bool(self.parent_tgids or self.comms)


class TracerBackend(Protocol):
    name: str

    def check(self) -> None:
        """Raise MissingTool/PermissionProblem when this backend cannot run here."""

    def version(self) -> str: ...

    def start(self, workdir: Path, *, attach_timeout_s: float = 60.0) -> int:
        """Start tracing; return the monotonic ns at which tracing was live."""

    def poll(self) -> ParsedChunk:
        """Events that arrived since the last poll (never blocks long)."""

    def alive(self) -> bool: ...

    def task_activity(self) -> TaskActivity | None:
        """Births and renames since the last call; None: this backend cannot tell in time."""

    def pending(self) -> int:
        """Events recorded but not yet returned by poll (a backend that defers ingest)."""

    def drain_into(self, writer: CaptureWriter) -> int:
        """After stop: append what poll and stop did not return; the number of events."""

    def stop(self) -> tuple[ParsedChunk, TracerReport]:
        """Stop tracing; return the remaining events and the final report."""


def kill_tracer(proc: subprocess.Popen | None) -> None:
    """SIGKILL a tracer process we started (if still running) and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def stderr_tail(path: Path | None, *, skip: str | None = None, lines: int = 5) -> str:
    """The last non-blank lines of a tracer's stderr file, joined with ' | ' (for error messages);
    lines containing `skip` (a known harmless warning) are left out."""
    if path is None or not path.exists():
        return ""
    kept = [line for line in path.read_text(errors="replace").splitlines()
            if line.strip() and (skip is None or skip not in line)]
    return " | ".join(kept[-lines:])


def wait_for_attach(proc: subprocess.Popen, name: str, err: Path, timeout_s: float,
                    live: Callable[[], int | None], *, skip: str | None = None) -> int:
    """The tracer's first live timestamp: `live()` reads what the tracer wrote so far (waiting
    briefly) and gives it once tracing has started. A tracer that exits first, or has not attached
    after `timeout_s` of host time given to it (not wall time: beside a lab that claims the host, a
    tracer that is compiling and loading waits for a CPU most of the time; givenclock), is a
    TracerError naming `name` and the tail of its stderr (`skip`: a known harmless line)."""
    deadline = Deadline.start(proc.pid, timeout_s)
    while (started := live()) is None:
        if proc.poll() is not None:
            live()   # what it wrote before exiting
            raise TracerError(f"{name} exited with status {proc.returncode} before tracing started: "
                              f"{stderr_tail(err, skip=skip)}")
        if deadline.passed():
            kill_tracer(proc)
            raise TracerError(f"{name} did not attach within {deadline.describe()}: "
                              f"{stderr_tail(err, skip=skip)}")
    return started
