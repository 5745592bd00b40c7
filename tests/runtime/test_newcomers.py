"""runtime/newcomers.py on real processes: who is re-matched, and when.

The watcher reads /proc for real; the re-match it asks for is recorded (what scx_layered does
with it is measured in the lab: tests/lab/test_titles_lab.py, a reload of nginx).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import stop_by_pid
from threadwise.observe.procfs import process_credentials
from threadwise.runtime import newcomers
from threadwise.synthesize.api import LayerConfig

NAME = f"twnc-{os.getpid() % 100000}"   # a comm of this test run's own
NOBODY = 65534

# A process of comm NAME that turns into nobody when its go-file appears, as an nginx worker
# forked by a root master does
TURNCOAT = f"""
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, {NAME.encode()!r}, 0, 0, 0)   # PR_SET_NAME: the process's comm
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.02)
os.setresgid({NOBODY}, {NOBODY}, {NOBODY})
os.setresuid({NOBODY}, {NOBODY}, {NOBODY})
time.sleep(60)
"""


def config(*, by_user: bool) -> LayerConfig:
    match = [{"PcommPrefix": NAME}, *([{"UIDEquals": NOBODY}] if by_user else [])]
    return LayerConfig.from_json_data([{"name": "role", "matches": [match], "kind": {"Open": {}}},
                                       {"name": "rest", "matches": [[]], "kind": {"Open": {}}}])


def recording() -> tuple[list[int], newcomers.Newcomers]:
    calls: list[int] = []
    watcher = newcomers.Newcomers.for_config(config(by_user=True), rematch=calls.append)
    assert watcher is not None
    return calls, watcher


def until(check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Wait for `check` (a child's start and its setuid: a second alone, more beside a lab)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_only_a_config_that_selects_by_user_is_watched() -> None:
    assert newcomers.selects_by_user(config(by_user=True))
    assert not newcomers.selects_by_user(config(by_user=False))
    assert newcomers.Newcomers.for_config(config(by_user=False)) is None


def start_named(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A process of comm NAME: a copy of sleep under that name."""
    program = tmp_path / NAME
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    return subprocess.Popen([str(program), "60"], start_new_session=True)


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process of comm NAME started before the watch."""
    process = start_named(tmp_path)
    try:
        yield process
    finally:
        stop_by_pid(process)


def test_a_process_present_when_the_watch_began_is_left_alone(sleeper: subprocess.Popen[bytes]) -> None:
    until(lambda: process_credentials(sleeper.pid) is not None
          and Path(f"/proc/{sleeper.pid}/comm").read_text().strip() == NAME)
    calls, watcher = recording()
    assert sleeper.pid in watcher.seen
    assert watcher.poll() == [] and calls == []


def test_a_process_started_after_the_watch_began_is_rematched_once(tmp_path: Path) -> None:
    calls, watcher = recording()
    process = start_named(tmp_path)
    try:
        until(lambda: Path(f"/proc/{process.pid}/comm").read_text().strip() == NAME)
        done = watcher.poll()
        assert [(pid, why) for pid, _, why in done] == [(process.pid, "started since the last look")]
        assert calls == [process.pid]
        assert watcher.poll() == [] and calls == [process.pid]   # once, not at every look
    finally:
        stop_by_pid(process)
    assert watcher.poll() == [] and process.pid not in watcher.seen   # gone: forgotten


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a process's user needs root")
def test_a_process_that_changes_user_is_rematched_again(tmp_path: Path) -> None:
    calls, watcher = recording()
    go = tmp_path / "go"
    process = subprocess.Popen([sys.executable, "-c", TURNCOAT, str(go)], start_new_session=True)
    try:
        until(lambda: Path(f"/proc/{process.pid}/comm").read_text().strip() == NAME)
        first = watcher.poll()
        assert [pid for pid, _, _ in first] == [process.pid] and first[0][1] == (0, 0)
        go.touch()
        until(lambda: process_credentials(process.pid) == (NOBODY, NOBODY))
        second = watcher.poll()
        assert second == [(process.pid, (NOBODY, NOBODY), "user changed from 0:0")]
        assert calls == [process.pid, process.pid]
    finally:
        stop_by_pid(process)
