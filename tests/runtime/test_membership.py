"""Membership helpers on real processes: the re-match (a re-attach to its cgroup, nudges) and the
match-map parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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


def test_a_thread_in_no_layer_is_a_fault_only_if_it_ran_since_the_re_match():
    """Real processes, an empty match map: the parked one is placed nowhere yet (ok), the one that
    wakes every 10 ms has run since the run counts were taken and is not in the map (a fault)."""
    from threadwise.synthesize.layered import LayerConfig

    config = LayerConfig.from_json_data([{"name": "py", "matches": [[{"PcommPrefix": "python"}]],
                                          "kind": {"Open": {}}},
                                         {"name": "rest", "matches": [[]], "kind": {"Open": {}}}])
    parked = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    waking = "import time\nprint('up', flush=True)\nwhile True: time.sleep(0.01)"
    waker = subprocess.Popen([sys.executable, "-c", waking], stdout=subprocess.PIPE, text=True)
    try:
        for proc in (parked, waker):
            assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        pids = [parked.pid, waker.pid]
        # "up" is printed before the sleep begins: on a busy host the parked one may run again
        # after the counts are taken, on its way into the sleep, unless they wait for it to sleep
        deadline = time.monotonic() + 30
        while membership.thread_state(parked.pid, parked.pid) != "S" and time.monotonic() < deadline:
            time.sleep(0.05)
        since = membership.run_counts(pids)
        deadline = time.monotonic() + 30  # until the waker has run again (a busy host may delay it)
        while membership.run_count(waker.pid, waker.pid) == since[waker.pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = {row.pid: row for row in membership.membership(config, pids=pids, match_map={}, since=since)}
        assert rows[parked.pid].ran is False and rows[parked.pid].ok
        assert rows[waker.pid].ran is True and not rows[waker.pid].ok
        unknown = membership.membership(config, pids=pids, match_map={})
        assert all(row.ran is None and not row.ok for row in unknown)
    finally:
        for proc in (parked, waker):
            proc.kill()
            proc.wait()


def test_task_layers_parse_every_kind_of_line():
    text = "138 1 0\n139 16 1\n140 - gone\n141 0 1\n142 - nocontext\n143 - 13\n144 -\nlayer-of: x\n"
    parsed = membership.parse_task_layers(text)
    # a thread with a re-match pending (141) is where it last ran; 16 (MAX_LAYERS): no layer yet
    assert parsed.layer == {138: 1, 139: 16, 141: 0}
    assert parsed.pending == {139, 141}
    assert parsed.gone == {140}
    # a live thread without a context, an errno, and the reader's old bare "-": not gone
    assert parsed.unknown == {142: "nocontext", 143: "13", 144: "unknown"}
    empty = membership.parse_task_layers("")
    assert (empty.layer, empty.pending, empty.gone, empty.unknown) == ({}, set(), set(), {})
