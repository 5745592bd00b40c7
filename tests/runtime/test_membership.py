"""Membership helpers on real processes: the STOP/CONT re-match and the match-map parser."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from threadwise.runtime import membership

# A process with a thread that sleeps in a blocking call the whole time: the case a too-early
# SIGCONT leaves untouched (a sleeping thread is woken by the stop, not by the continue).
SLEEPERS = """
import threading, time, sys
for i in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _states(pid: int) -> set[str]:
    states = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            states.add(f.read().rpartition(") ")[2][:1])
    return states


@pytest.fixture
def sleepers():
    proc = subprocess.Popen([sys.executable, "-c", SLEEPERS], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def test_all_stopped_sees_every_thread(sleepers):
    assert len(os.listdir(f"/proc/{sleepers.pid}/task")) == 4
    assert not membership._all_stopped(sleepers.pid)
    os.kill(sleepers.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while not membership._all_stopped(sleepers.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _states(sleepers.pid) <= {"T", "t"}
    finally:
        os.kill(sleepers.pid, signal.SIGCONT)


def test_rematch_stops_every_thread_then_continues_them(sleepers):
    membership.rematch(sleepers.pid)
    deadline = time.monotonic() + 10
    while "T" in _states(sleepers.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "T" not in _states(sleepers.pid)
    assert sleepers.poll() is None


def test_rematch_of_a_gone_process_raises_lookup_error():
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(ProcessLookupError):
        membership.rematch(proc.pid)


def test_map_dump_parses_btf_and_raw_forms():
    btf = [{"key": [hex(b) for b in (0x8A, 0, 0, 0)], "value": ["0x01", "0x00", "0x00", "0x00"],
            "formatted": {"key": 138, "value": 1}}]
    raw = [{"key": ["0x8b", "0x00", "0x00", "0x00"], "value": ["0x02", "0x00", "0x00", "0x00"]}]
    assert membership.parse_map_dump(json.dumps(btf)) == {138: 1}
    assert membership.parse_map_dump(json.dumps(raw)) == {139: 2}
    assert membership.parse_map_dump("") == {}
