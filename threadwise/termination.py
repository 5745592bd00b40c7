"""SIGTERM as state as well as an exception.

Problem: `threadwise` turns SIGTERM into an exception (`Terminated`), raised in the main thread,
so that every `finally` stops what the command started (the lab's qemu, a service, a tracer). But
an exception raised from a signal handler can be lost: raised while a finalizer runs (`__del__`,
e.g. a Popen's), Python prints "Exception ignored" and goes on; raised inside a DuckDB query, it
becomes DuckDB's own error ("Query interrupted"). A command would then go on for as long as its
work takes: a canary judged on for 300 s after a SIGTERM (a CI run, 2026-12-06; the canary keeps
its own request the same way, refine/canary/run.py).

Approach: the handler records the request before it raises. Long waits call `check()`, which
raises the request again; the CLI exits 143 whenever a request was recorded, whatever the command
made of the exception.
"""

from __future__ import annotations


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` runs: the lab's qemu, a service
    and a tracer started by this command are stopped by PID (a plain SIGTERM death left qemu
    running, orphaned, once a `train` was stopped by its PID)."""


class _Request:
    def __init__(self) -> None:
        self.signal: str | None = None


_REQUEST = _Request()


def request(name: str = "SIGTERM") -> None:
    """Record that the process was asked to stop (the signal handler, before it raises)."""
    _REQUEST.signal = name


def requested() -> bool:
    return _REQUEST.signal is not None


def clear() -> None:
    """Forget a request (a new command in the same process; tests)."""
    _REQUEST.signal = None


def check() -> None:
    """Raise `Terminated` again if a request was recorded: its first raise may have been lost."""
    if _REQUEST.signal is not None:
        raise Terminated(_REQUEST.signal)
