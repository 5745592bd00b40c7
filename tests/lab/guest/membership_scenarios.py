"""Runs INSIDE the lab VM: does scx_layered's match map hold every target thread after a re-match?

scx_layered 1.1.4's match map (layer_match_dbg) loses entries when many threads match at once
(runtime/membership.py `rematch`). This script applies a two-layer config through the real CLI
(`apply --no-rematch`) and records, from the real map:
- `crowd`: 60 threads that wake every 200 ms, started before the attach: how many the map held
  3 s after the attach, and 3 s after membership.rematch;
- `late`: a single-threaded process started after the attach that renames itself and never
  blocks (matched at fork under its old name): its layer before and after rematch;
- `burst`: 100 threads blocked for good, started after the attach: how many the map holds after
  one SIGSTOP/SIGCONT of their process (the burst the old re-match caused; a measurement);
- for `crowd` after the attach and `burst` after the SIGCONT, also where scx_layered's own task
  state has each thread (`membership.read_placement`, threadwise-layer-of): the placement the
  map's lost entries hide.
Writes $THREADWISE_LAB_OUT/results.json; tests/lab/test_membership_lab.py asserts on it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from threadwise.runtime import membership

OUT = Path(os.environ["THREADWISE_LAB_OUT"])
CONFIG = [
    {"name": "crowd", "matches": [[{"CommPrefix": "tw-"}]], "kind": {"Open": {}}},
    {"name": "rest", "matches": [[]], "kind": {"Open": {}}},
]
CROWD = """
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)
n, mode = int(sys.argv[1]), sys.argv[2]
ready = threading.Barrier(n + 1)
def body(i):
    libc.prctl(15, f"tw-{mode}-{i:02d}".encode(), 0, 0, 0)
    ready.wait()
    while mode == "wake":
        time.sleep(0.2)
    threading.Event().wait()
for i in range(n):
    threading.Thread(target=body, args=(i,), daemon=True).start()
ready.wait()
print("ready", flush=True)
threading.Event().wait()
"""
# one thread, no other to take the GIL: it never blocks once it spins
LATE = """
import ctypes, time
time.sleep(0.5)
ctypes.CDLL(None).prctl(15, b"tw-late", 0, 0, 0)
while True:
    pass
"""


def start(code: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    if args:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def in_map(pid: int) -> dict[str, int | None]:
    """comm -> layer index in the match map (None: not in it), for every named thread of `pid`."""
    layer_of = membership.read_match_map()
    threads = membership.process_threads(pid)
    return {comm: layer_of.get(tid) for tid, comm in threads if comm.startswith("tw-")}


def placed(pid: int) -> dict[str, int | None]:
    """comm -> the layer scx_layered's task state has the thread in (threadwise-layer-of)."""
    threads = [(tid, comm) for tid, comm in membership.process_threads(pid) if comm.startswith("tw-")]
    layer_of = membership.read_placement([tid for tid, _ in threads])
    return {comm: layer_of.get(tid) for tid, comm in threads}


def threadwise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          timeout=600, check=False)


def main() -> None:
    config = OUT / "config.json"
    config.write_text(json.dumps(CONFIG))
    crowd = start(CROWD, "60", "wake")
    results: dict[str, object] = {}
    from threadwise.observe.tracer_build import layer_of_path
    results["reader"] = str(layer_of_path()) if layer_of_path().is_file() else None
    procs = [crowd]
    try:
        applied = threadwise("apply", str(config), "--no-rematch")
        results["apply"] = {"rc": applied.returncode, "stderr": applied.stderr[-2000:]}
        if applied.returncode:
            return
        late = start(LATE)
        procs.append(late)
        time.sleep(3)
        results["crowd_after_attach"] = in_map(crowd.pid)
        results["crowd_placed_after_attach"] = placed(crowd.pid)
        results["late_before"] = in_map(late.pid)
        for proc in (crowd, late):
            membership.rematch(proc.pid)
        time.sleep(3)
        results["crowd_after_rematch"] = in_map(crowd.pid)
        results["late_after"] = in_map(late.pid)
        burst = start(CROWD, "100", "block")
        procs.append(burst)
        time.sleep(1)
        os.kill(burst.pid, signal.SIGSTOP)
        time.sleep(1)
        os.kill(burst.pid, signal.SIGCONT)
        time.sleep(3)
        results["burst_after_stop_continue"] = in_map(burst.pid)
        results["burst_placed_after_stop_continue"] = placed(burst.pid)
        membership.rematch(burst.pid)  # blocked for good: nothing wakes them to match again
        time.sleep(2)
        results["burst_after_rematch"] = in_map(burst.pid)
    finally:
        stopped = threadwise("stop")
        results["stop_rc"] = stopped.returncode
        for proc in procs:  # by PID, ours
            proc.kill()
            proc.wait()
        (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
