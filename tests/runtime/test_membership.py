"""Membership helpers on real processes: the re-match (a re-attach to its cgroup, nudges) and the
match-map parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from threadwise.runtime import membership

# A process with sleeping threads and one that spins (state R: the one `rematch` re-queues).
SLEEPERS = """
import threading, time
for i in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def sleepers():
    proc = subprocess.Popen([sys.executable, "-c", SLEEPERS], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def _nice(pid: int) -> dict[int, int]:
    return {int(tid): os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def test_cgroup2_root_on_a_unified_and_a_hybrid_host():
    unified = "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
    hybrid = ("tmpfs /sys/fs/cgroup tmpfs ro 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
              "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    assert membership.cgroup2_root(unified) == Path("/sys/fs/cgroup")
    assert membership.cgroup2_root(hybrid) == Path("/sys/fs/cgroup/unified")
    assert membership.cgroup2_root("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="re-attaching a process to its cgroup needs root")
def test_rematch_leaves_the_process_where_it_was_and_every_nice_as_it_was(sleepers):
    before_cgroup = Path(f"/proc/{sleepers.pid}/cgroup").read_text()
    before_nice = _nice(sleepers.pid)
    membership.rematch(sleepers.pid)
    assert Path(f"/proc/{sleepers.pid}/cgroup").read_text() == before_cgroup
    assert _nice(sleepers.pid) == before_nice
    assert sleepers.poll() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="putting a raised nice value back needs root")
def test_nudge_puts_the_nice_value_back(sleepers):
    spinner = max(_nice(sleepers.pid))  # the last thread started
    before = os.getpriority(os.PRIO_PROCESS, spinner)
    membership.nudge(spinner)
    assert os.getpriority(os.PRIO_PROCESS, spinner) == before


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
