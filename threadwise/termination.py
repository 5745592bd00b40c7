"""A stop asked for by a signal, kept as state as well as raised.

Problem: `threadwise` turns SIGTERM into an exception (`Terminated`), raised in the main thread,
so that every `finally` stops what the command started (the lab's qemu, a service, a tracer); the
canary turns SIGINT and SIGTERM into a rollback the same way. But an exception raised from a
signal handler can be lost: raised while a finalizer runs (`__del__`, e.g. a Popen's), Python
prints "Exception ignored" and goes on; raised inside a DuckDB query, it becomes DuckDB's own
error ("Query interrupted"). A command would then go on for as long as its work takes: a canary
judged on for 300 s after a SIGTERM (a CI run, 2026-12-06).

Approach: a `StopRequest`'s handler records the signal before it raises. Long waits and loops
call `check()`, which raises it again; a caller that catches another error can still see that a
stop was asked for (`signal`). `COMMAND` is the `threadwise` command's own (cli.main installs it
for SIGTERM and exits 143 whenever it was asked, whatever the command made of the exception).
"""

from __future__ import annotations

import contextlib
import signal as signals
from collections.abc import Callable, Iterator
from types import FrameType


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` runs: the lab's qemu, a service
    and a tracer started by this command are stopped by PID (a plain SIGTERM death left qemu
    running, orphaned, once a `train` was stopped by its PID)."""


class StopRequest:
    """The signal that asked for a stop (None: none did), raised as `raises(its name)`."""

    def __init__(self, raises: Callable[[str], BaseException]) -> None:
        self.raises = raises
        self.signal: str | None = None

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = signals.Signals(signum).name
        raise self.raises(self.signal)

    def check(self) -> None:
        """Raise the request again if one was recorded: its first raise may have been lost."""
        if self.signal is not None:
            raise self.raises(self.signal)

    def clear(self) -> None:
        self.signal = None

    @contextlib.contextmanager
    def installed(self, *signums: int) -> Iterator[None]:
        """`handler` for `signums` while the block runs; the previous handlers after it."""
        old = {signum: signals.signal(signum, self.handler) for signum in signums}
        try:
            yield
        finally:
            for signum, previous in old.items():
                signals.signal(signum, previous)


COMMAND = StopRequest(Terminated)   # the running `threadwise` command's SIGTERM
