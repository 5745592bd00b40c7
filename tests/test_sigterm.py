"""SIGTERM stops a command through its `finally` blocks (exit 143), so what it started is stopped.

A `train` stopped by its PID once left the lab's qemu running, orphaned: Python's default SIGTERM
ends the process without unwinding. Checked in-process with a stand-in command whose `finally`
stands for stopping qemu (runtime/lab/initramfs.py `_follow`) or a service (refine/measure/service.py).

A SIGTERM whose exception went astray (threadwise/termination.py) stops the command too: sent from
inside a finalizer (tests/lost_signal.py), the lab's wait loop (runtime/lab/vng.py `_boot`, here
around a real `sleep` in its own session) raises it again and stops the session by its process
group, and the CLI exits 143 even when the command ran to its end or the signal became another
error.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.lost_signal import SignalInFinalizer
from threadwise import cli, termination
from threadwise.runtime.lab import vng


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


class LosesTheSignalOnce:
    """A stand-in for the guest-output follower: its first poll runs the finalizer."""

    def __init__(self) -> None:
        self.polls = 0

    def poll(self) -> None:
        self.polls += 1
        if self.polls == 1:
            SignalInFinalizer()

    def progress(self, _line: str) -> None:
        return None

    def finish(self) -> None:
        return None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_lab_wait_raises_a_lost_sigterm_and_stops_its_session(tmp_path: Path) -> None:
    follower = LosesTheSignalOnce()
    pid_file = tmp_path / "session.pid"
    started = time.monotonic()
    with termination.COMMAND.installed(signal.SIGTERM), pytest.raises(termination.Terminated):
        vng._boot(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"], dict(os.environ), tmp_path,
                  tmp_path / "console.log", 120.0, follower=follower, host_priority=False)  # type: ignore[arg-type]
    termination.COMMAND.clear()
    assert follower.polls == 1, "the wait went on polling after the signal"
    assert time.monotonic() - started < 30
    # the session was stopped by its process group (and reaped): its `sleep 60` is gone
    assert not Path(f"/proc/{pid_file.read_text().strip()}").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_cli_exits_143_when_the_command_ran_on_after_a_lost_sigterm(monkeypatch, capsys):
    def a_command_that_loses_it(_argv: list[str] | None) -> int:
        SignalInFinalizer()
        return 0

    monkeypatch.setattr(cli, "_main", a_command_that_loses_it)
    assert cli.main(["status"]) == 143
    assert "terminated (SIGTERM)" in capsys.readouterr().err
    assert termination.COMMAND.signal is None   # a later command in this process starts clean


def test_the_cli_exits_143_when_the_sigterm_surfaced_as_another_error(monkeypatch, capsys):
    def a_command_whose_query_was_interrupted(_argv: list[str] | None) -> int:
        termination.COMMAND.signal = "SIGTERM"   # what the handler records before it raises
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(cli, "_main", a_command_whose_query_was_interrupted)
    assert cli.main(["status"]) == 143
    err = capsys.readouterr().err
    assert "RuntimeError: Query interrupted" in err and "terminated (SIGTERM)" in err


def test_without_a_sigterm_an_error_is_still_raised(monkeypatch):
    def a_bug(_argv: list[str] | None) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_main", a_bug)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["status"])
