"""The lab guest's watchdog: a guest that keeps talking runs on, a silent one is stopped.

The rule on numbers (watchdog.py), then the console follower on real processes that speak the
guest's console protocol (TWAGENT/TWCLOCK lines): one that talks past what a fixed deadline
would allow finishes; one whose agent goes silent, while clock lines keep coming, is stopped.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path

from threadwise.runtime.lab.initramfs import Console, _follow, _reader
from threadwise.runtime.lab.watchdog import Watchdog, fixed


def test_silence_past_the_stall_bound_fires_and_talk_resets_it() -> None:
    dog = Watchdog(started=100.0, stall_s=30.0, cap_s=1000.0)
    assert dog.remaining(120.0) == 10.0
    dog.heard(125.0)
    assert dog.remaining(150.0) == 5.0
    assert dog.remaining(156.0) < 0
    assert "said nothing for 31 s" in dog.why(156.0)


def test_the_cap_holds_however_steadily_the_guest_talks() -> None:
    dog = Watchdog(started=0.0, stall_s=30.0, cap_s=100.0)
    for now in range(0, 100, 10):
        dog.heard(float(now))
    assert dog.remaining(95.0) == 5.0
    assert dog.remaining(100.0) == 0.0
    assert "cap of 100 s" in dog.why(100.0)


def test_a_fixed_deadline_ignores_talk() -> None:
    dog = fixed(0.0, 50.0)
    dog.heard(49.0)
    assert dog.remaining(50.0) == 0.0


def spawn(script: str) -> tuple[subprocess.Popen[bytes], queue.Queue[tuple[float, str] | None]]:
    """A process speaking the console protocol, and its lines as the lab's reader queues them."""
    process = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    assert process.stdout is not None
    lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    return process, lines


def follow(script: str, dog: Watchdog, tmp_path: Path) -> tuple[bool, float, Console]:
    process, lines = spawn(script)
    console = Console(tmp_path, lambda _line: None)
    started = time.monotonic()
    _, timed_out = _follow(process, lines, console, dog)
    return timed_out, time.monotonic() - started, console


def test_a_guest_that_keeps_talking_outlives_what_a_fixed_deadline_allowed(tmp_path: Path) -> None:
    # 3 s of steady progress against a 1.5-s estimate: the old fixed deadline stopped this
    talker = "for i in 1 2 3 4 5 6; do echo \"TWAGENT: agent: cell $i: done (0)\"; sleep 0.5; done"
    timed_out, took, console = follow(talker, Watchdog(time.monotonic(), stall_s=20.0, cap_s=120.0),
                                      tmp_path)
    assert not timed_out
    assert len(console.agent_lines) == 6
    assert took >= 2.5


def test_an_agent_that_goes_silent_is_stopped_though_the_clock_ticks(tmp_path: Path) -> None:
    stuck = ("echo 'TWAGENT: agent: cell 0: arm=baseline bg=0 repeat=1'; "
             "while :; do echo 'TWCLOCK: 1.0'; sleep 0.2; done")
    # The watchdog starts when the agent's line is out: one started before the spawn counts the
    # shell's start-up as silence, and beside a lab that claims the host that can pass 2 s (the
    # likely cause of two fast-tier failures beside ladders, 2026-11-29). What is tested is the
    # silence after the agent spoke, so the bound counts from there.
    process, lines = spawn(stuck)
    first = lines.get(timeout=60)
    assert first is not None and first[1].startswith("TWAGENT: ")
    console = Console(tmp_path, lambda _line: None)
    console.feed(first[1], first[0])   # as _follow takes a line: into the console, heard at its time
    dog = Watchdog(first[0], stall_s=2.0, cap_s=120.0)
    _, timed_out = _follow(process, lines, console, dog)
    took = time.monotonic() - first[0]
    assert timed_out
    assert 2.0 <= took < 60.0  # stopped at the stall bound, long before the cap
    assert console.agent_lines == ["agent: cell 0: arm=baseline bg=0 repeat=1"]
