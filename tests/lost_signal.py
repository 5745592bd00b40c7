"""A SIGTERM whose handler's exception is lost: the signal is sent from inside a finalizer, where
Python prints "Exception ignored" and drops it (as a Popen's `__del__` can), for the tests of
threadwise/termination.py's users (the CLI, the lab's wait, the canary)."""

from __future__ import annotations

import os
import signal


class SignalInFinalizer:
    """Create one and drop it: its `__del__` sends SIGTERM to this process."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):   # bytecode after the kill: the handler runs here, inside __del__
            pass
