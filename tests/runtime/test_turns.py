"""Labs take turns on a host with too few cores for both (runtime/lab/turns.py): real processes
holding real flock'd slots in a scratch directory, never the host's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from threadwise.runtime.lab import turns

HOLDER = """
import sys, time
from pathlib import Path
from threadwise.runtime.lab.turns import take_turn
with take_turn(int(sys.argv[2]), lambda line: None, directory=Path(sys.argv[1]), slots=int(sys.argv[3])):
    print("holding", flush=True)
    time.sleep(600)
"""


def _holder(directory: Path, vcpus: int, slots: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), str(vcpus), str(slots)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


def test_a_lab_waits_while_another_holds_the_host_and_says_for_whom(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(turns, "REMIND_S", 3600.0)
    other = _holder(tmp_path, 2, 2)
    said: list[str] = []
    # the other lab ends after a while: this one must have waited for it, not booted beside it
    ender = subprocess.Popen(["sh", "-c", f"sleep 1.5; kill {other.pid}"])
    try:
        with turns.take_turn(2, said.append, directory=tmp_path, slots=2) as waited:
            assert other.poll() is not None or other.wait(timeout=5) is not None
            assert waited >= 1.0
    finally:
        ender.wait()
        _stop(other)
    assert f"pid {other.pid}: " in said[0] and "waiting for its turn on this host's 2 CPUs" in said[0]
    assert said[-1].startswith("lab: its turn after")
    assert list((tmp_path / "queue").iterdir()) == []   # its ticket is gone


def test_labs_that_fit_the_host_run_side_by_side(tmp_path: Path) -> None:
    other = _holder(tmp_path, 2, 4)
    said: list[str] = []
    try:
        with turns.take_turn(2, said.append, directory=tmp_path, slots=4) as waited:
            assert waited < 5 and said == []
            # and a third does not fit: nothing is free until one of the two ends
            assert turns._try_take(tmp_path, 4, 2, "third") is None
            assert any(f"pid {other.pid}: " in who for who in turns.holders(tmp_path, 4))
    finally:
        _stop(other)


def test_an_older_live_ticket_goes_first_and_a_dead_ones_is_removed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(turns, "REMIND_S", 3600.0)
    queue = tmp_path / "queue"
    queue.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (queue / f"{1:020d}-{dead.pid}").touch()
    # an older waiter that is not our child (reaped by init when it ends), gone after 1.5 s
    older = int(subprocess.run(["sh", "-c", "sleep 1.5 > /dev/null 2>&1 & echo $!"], capture_output=True,
                               text=True, check=True).stdout)
    (queue / f"{2:020d}-{older}").touch()
    said: list[str] = []
    with turns.take_turn(1, said.append, directory=tmp_path, slots=2) as waited:
        # the slots were free all along: only the older waiter's ticket held this one back
        assert not turns._alive(older) and waited >= 1.0   # ended (a zombie until reaped)
    assert "another lab, queued before this one" in said[0]
    assert not (queue / f"{1:020d}-{dead.pid}").exists()


def test_turns_off_boots_at_once(tmp_path: Path, monkeypatch) -> None:
    other = _holder(tmp_path, 2, 2)
    monkeypatch.setenv(turns.SWITCH, "off")
    try:
        with turns.take_turn(2, pytest.fail, directory=tmp_path, slots=2) as waited:
            assert waited == 0.0
    finally:
        _stop(other)


def test_the_host_directory_is_used_where_it_can_be_written() -> None:
    where = turns.turns_dir()
    expected = turns.HOST_DIR if os.geteuid() == 0 else None
    assert os.access(where, os.W_OK) and (expected is None or where == expected)
    assert turns.host_slots() == len(os.sched_getaffinity(0)) >= 1


def test_a_turn_inside_a_turn_of_the_same_process_is_free(tmp_path: Path) -> None:
    with turns.take_turn(2, pytest.fail, directory=tmp_path, slots=2), \
            turns.take_turn(2, pytest.fail, directory=tmp_path, slots=2) as waited:
        assert waited == 0.0
    # and given back: a new turn gets the slots at once
    with turns.take_turn(2, pytest.fail, directory=tmp_path, slots=2) as waited:
        assert waited < 5


def test_where_no_turn_can_be_taken_the_lab_says_so_and_boots(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the directory should be")
    said: list[str] = []
    with turns.take_turn(2, said.append, directory=blocked / "turns", slots=2) as waited:
        assert waited == 0.0
    assert len(said) == 1 and said[0].startswith("lab: cannot take turns with other labs")


def test_the_wait_does_not_count_against_the_callers_alarm(tmp_path: Path, monkeypatch) -> None:
    """An alarm armed before the wait (pytest-timeout's, here 1 s) neither fires during a 2-s wait
    for another lab nor is lost: it is armed again with what was left once the turn is taken."""
    import signal

    monkeypatch.setattr(turns, "REMIND_S", 3600.0)
    fired: list[float] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1.0))
    other = _holder(tmp_path, 2, 2)
    ender = subprocess.Popen(["sh", "-c", f"sleep 2; kill {other.pid}"])
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with turns.take_turn(2, lambda _line: None, directory=tmp_path, slots=2) as waited:
            assert waited >= 1.5 and not fired      # the alarm would have fired at 1 s
            left, _ = signal.getitimer(signal.ITIMER_REAL)
            assert 0.5 < left <= 1.0                # armed again with (about) all it had
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        ender.wait()
        _stop(other)
