"""A SIGTERM whose exception went astray still stops the command (threadwise/termination.py).

The signal is sent from inside a finalizer, where Python prints "Exception ignored" and drops
the handler's exception: the lab's wait loop (runtime/lab/vng.py `_boot`, here around a real
`sleep` in its own session) must raise it again and stop the session by its process group, and
the CLI must exit 143 even when the command itself ran to its end.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from threadwise import cli, termination
from threadwise.runtime.lab import vng


class SignalInFinalizer:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):   # bytecode after the kill: the handler runs here, inside __del__
            pass


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


@pytest.fixture
def terminate_handler():
    previous = signal.signal(signal.SIGTERM, cli._terminate)
    termination.clear()
    yield
    signal.signal(signal.SIGTERM, previous)
    termination.clear()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_lab_wait_raises_a_lost_sigterm_and_stops_its_session(tmp_path: Path, terminate_handler):
    follower = LosesTheSignalOnce()
    started = time.monotonic()
    with pytest.raises(termination.Terminated):
        vng._boot(["sleep", "60"], dict(os.environ), tmp_path, tmp_path / "console.log", 120.0,
                  follower=follower, host_priority=False)  # type: ignore[arg-type]
    assert follower.polls == 1, "the wait went on polling after the signal"
    assert time.monotonic() - started < 30
    # the session was stopped by its process group: no `sleep 60` of ours is left
    mine = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    left = [p.name for p in mine if _cmdline(p) == "sleep\x0060\x00" and _ppid(p) == os.getpid()]
    assert not left, left


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_cli_exits_143_when_the_command_ran_on_after_a_lost_sigterm(monkeypatch, capsys):
    def a_command_that_loses_it(_argv: list[str] | None) -> int:
        SignalInFinalizer()
        return 0

    monkeypatch.setattr(cli, "_main", a_command_that_loses_it)
    assert cli.main(["status"]) == 143
    assert "terminated (SIGTERM)" in capsys.readouterr().err
    assert not termination.requested()   # a later command in this process starts clean


def test_the_cli_exits_143_when_the_sigterm_surfaced_as_another_error(monkeypatch, capsys):
    def a_command_whose_query_was_interrupted(_argv: list[str] | None) -> int:
        termination.request()
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


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_text()
    except OSError:
        return ""


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
