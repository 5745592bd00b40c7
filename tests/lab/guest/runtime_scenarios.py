"""Runs INSIDE the lab VM: apply/status/stop, a refused config, kill -9 of scx_layered.

Writes $THREADWISE_LAB_OUT/results.json; the host-side tests assert on it
(tests/lab/test_runtime_lab.py). Every step goes through the real CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ["THREADWISE_LAB_OUT"])
HERE = Path(__file__).parent
RUN_DIR = Path("/run/threadwise")
GOOD = [
    {
        "name": "hot",
        "comment": "the spinner",
        "matches": [[{"CommPrefix": "tw-hot"}]],
        "kind": {"Confined": {"util_range": [0.5, 0.9], "cpus_range": [1, 1]}},
    },
    {"name": "rest", "comment": "everything else", "matches": [[]], "kind": {"Open": {}}},
]
# Parses (--print-and-exit accepts it) but scx_layered refuses it at load:
# the last layer must be an empty catch-all (verify_layer_specs).
REFUSED = [GOOD[0], {"name": "rest", "matches": [[{"CommPrefix": "x"}]], "kind": {"Open": {}}}]


# The drivers run threadwise's commands at nice -20. Python starts slowly under TCG and beside a
# spinning workload slower still: at nice 0 beside rolesim `apply` took 79 s in CI, of which the
# attach was 30, and 50 s at nice -20 (placement, 2026-12-06; `status` and `stop`, run while
# scx_layered is attached, were not shorter). What these tests check (layers, placement, state)
# does not depend on the command's priority, and once attached the supervisor and scx_layered run
# at nice 0 whatever the nice of `apply` (runtime/priority.py).
DRIVER_NICE = -20


def at_driver_nice() -> None:   # between fork and exec
    os.setpriority(os.PRIO_PROCESS, 0, DRIVER_NICE)


def threadwise(*args: str, timeout: float = 300) -> dict:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "threadwise.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=at_driver_nice,   # the driver runs no threads: safe between fork and exec
    )
    result = {
        "rc": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "seconds": round(time.monotonic() - started, 2),
    }
    with contextlib.suppress(ValueError):
        result["json"] = json.loads(done.stdout)
    return result


def sysfs() -> dict:
    root = Path("/sys/kernel/sched_ext")
    return {
        "state": (root / "state").read_text().strip(),
        "ops": (root / "root/ops").read_text().strip() if (root / "root/ops").exists() else "",
    }


def state_file() -> dict:
    return json.loads((RUN_DIR / "state.json").read_text())


def wait_phase(phases: tuple[str, ...], timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = state_file()
        if state.get("phase") in phases:
            return state
        time.sleep(0.2)
    return state_file()


def write(name: str, data: object) -> Path:
    path = OUT / name
    path.write_text(json.dumps(data, indent=2))
    return path


def apply_stats_stop(good: Path) -> dict:
    spinner = subprocess.Popen([sys.executable, str(HERE / "spinner.py"), "tw-hot", "600"])
    try:
        applied = threadwise("apply", str(good), "--json")
        status = threadwise("status", "--json", "--interval", "2")
        spinner_sched = Path(f"/proc/{spinner.pid}/sched").read_text()
        stopped = threadwise("stop", "--json")
    finally:
        spinner.kill()
        spinner.wait()
    ext_enabled = [line for line in spinner_sched.splitlines() if "ext.enabled" in line]
    return {
        "apply": applied,
        "status": status,
        "stop": stopped,
        "after": sysfs(),
        "spinner_ext_enabled": ext_enabled,
    }


def refused(bad: Path) -> dict:
    applied = threadwise("apply", str(bad))
    return {"apply": applied, "after": sysfs(), "state": state_file()}


def kill_9(good: Path) -> dict:
    applied = threadwise("apply", str(good), "--json")
    before = sysfs()
    scx_pid = state_file()["scx_pid"]
    os.kill(scx_pid, signal.SIGKILL)
    noticed = wait_phase(("failed", "stopped"))
    status = threadwise("status", "--json", "--interval", "0")
    stopped = threadwise("stop")
    return {
        "apply": applied,
        "before": before,
        "noticed": noticed,
        "status": status,
        "stop": stopped,
        "after": sysfs(),
    }


def sysrq(good: Path) -> dict:
    """The kernel ejects the scheduler (SysRq-S): exit kind from scx_layered's EXIT line."""
    applied = threadwise("apply", str(good), "--json")
    Path("/proc/sysrq-trigger").write_text("S")
    noticed = wait_phase(("failed", "stopped"))
    status = threadwise("status", "--json", "--interval", "0")
    return {"apply": applied, "noticed": noticed, "status": status, "after": sysfs()}


def supervisor_killed(good: Path) -> dict:
    """SIGKILL the supervisor: PDEATHSIG makes scx_layered unregister by itself."""
    applied = threadwise("apply", str(good), "--json")
    again = threadwise("apply", str(good))  # refused: already applied
    state = state_file()
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while sysfs()["state"] != "disabled" and time.monotonic() < deadline:
        time.sleep(0.2)
    after = sysfs()
    status = threadwise("status", "--json", "--interval", "0")
    stopped = threadwise("stop", "--json")
    return {
        "apply": applied,
        "again": again,
        "after": after,
        "status": status,
        "stop": stopped,
        "scx_gone": not Path(f"/proc/{state['scx_pid']}").exists()
        or "Z" in Path(f"/proc/{state['scx_pid']}/stat").read_text().split(")")[-1].split()[0],
    }


def main() -> None:
    good, bad = write("good.json", GOOD), write("refused.json", REFUSED)
    results: dict = {"timings": {}}
    for name, scenario, arg in (
        ("apply_stats_stop", apply_stats_stop, good),
        ("refused", refused, bad),
        ("kill_9", kill_9, good),
        ("supervisor_killed", supervisor_killed, good),
        ("sysrq", sysrq, good),
    ):
        started = time.monotonic()
        try:
            results[name] = scenario(arg)
        except Exception as error:  # report, and go on with the next scenario
            results[name] = {"error": repr(error)}
        results["timings"][name] = round(time.monotonic() - started, 1)
        write("results.json", results)
    # Whatever happened above, leave nothing attached.
    if sysfs()["state"] != "disabled":
        threadwise("stop")


if __name__ == "__main__":
    main()
