"""What the canary says when the profile's scheduler ends on its own (refine/canary/switch.py
`ended_why`): the supervisor's record of the exit, waited for, since sysfs reads `disabling`
seconds before the supervisor has written why."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from threadwise.refine.canary.switch import ended_why
from threadwise.runtime.exitinfo import classify
from threadwise.runtime.state import Phase, RunFiles, RunState, write_state

# scx_layered's last lines when the guest kernel ejected it in CI's lab run of 2026-12-01
EJECTED = ("scx_layered: main.rs:4612: Unregister scx_layered scheduler\n"
           "Error: EXIT: runtime error (RCU CPU stall on CPUs ())\n")


def test_an_ejection_the_supervisor_records_late_is_waited_for(tmp_path: Path):
    files = RunFiles(tmp_path)
    write_state(files, RunState(Phase.ATTACHED, source="redis.toml"))
    ended = RunState(Phase.FAILED, source="redis.toml", exit=classify(EJECTED, 1, attached=True))
    late = threading.Timer(0.5, write_state, (files, ended))
    late.start()
    try:
        started = time.monotonic()
        said = ended_why(files, wait_s=30)
    finally:
        late.join()
    assert said == "error, exit status 1: EXIT: runtime error (RCU CPU stall on CPUs ())"
    assert time.monotonic() - started >= 0.5


def test_a_run_still_attached_or_never_recorded_says_nothing(tmp_path: Path):
    assert ended_why(RunFiles(tmp_path), wait_s=0.3) is None
    files = RunFiles(tmp_path)
    write_state(files, RunState(Phase.ATTACHED, source="redis.toml"))
    assert ended_why(files, wait_s=0.3) is None
