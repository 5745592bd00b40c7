"""train's capture takes the host's turn (refine/train.py observe_workload): it waits while a lab
VM holds the host, since a lab claims the host at nice -20 and a workload captured beside one is
starved into other behaviour (the demo of 2026-11-29 synthesized a losing profile that way).
Real processes hold real flock'd slots in a scratch directory, never the host's own; the capture
itself is replaced, as its own tests run it for real."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from threadwise.refine import train
from threadwise.refine.measure.workload import bundled_workload_path, load_workload
from threadwise.runtime.lab import turns

HOLDER = """
import sys, time
from pathlib import Path
from threadwise.runtime.lab.turns import host_slots, take_turn
with take_turn(host_slots(), lambda line: None, directory=Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_the_capture_waits_for_a_lab_that_holds_the_host(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turns, "HOST_DIR", tmp_path)   # turns_dir() is then this scratch directory
    lab = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "1.5"], stdout=subprocess.PIPE,
                           text=True)
    assert lab.stdout is not None and lab.stdout.readline().strip() == "holding"
    began: list[float] = []
    monkeypatch.setattr(train, "_observe_workload", lambda *_args: began.append(time.monotonic()))
    said: list[str] = []
    start = time.monotonic()
    try:
        train.observe_workload(load_workload(bundled_workload_path("rolesim")), tmp_path / "c.duckdb", 1.0,
                               tmp_path, said.append)
    finally:
        lab.kill()
        lab.wait()
    assert began and began[0] - start >= 1.0, (began, start)   # it began only after the lab ended
    assert said[0].startswith("train: capture: lab: waiting for its turn") and f"pid {lab.pid}" in said[0]
    assert said[-1].startswith("train: capture: lab: its turn after")
