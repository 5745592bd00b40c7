"""SIGTERM stops a command through its `finally` blocks (exit 143), so what it started is stopped.

A `train` stopped by its PID once left the lab's qemu running, orphaned: Python's default SIGTERM
ends the process without unwinding. Checked in-process with a stand-in command whose `finally`
stands for stopping qemu (runtime/lab/initramfs.py `_follow`) or a service (refine/measure/service.py).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from threadwise import cli


def test_sigterm_unwinds_the_command_and_exits_143(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    stopped: list[str] = []

    def command(_argv: list[str] | None = None) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this returns
            return 0
        finally:
            stopped.append("qemu")

    monkeypatch.setattr(cli, "_main", command)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["ladder"]) == 143
    assert stopped == ["qemu"]
    assert "terminated (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # the handler lives only while a command runs
