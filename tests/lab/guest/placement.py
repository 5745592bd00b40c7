"""Runs INSIDE the lab VM: apply a profile, observe the workload under it, stop.

usage: placement.py PROFILE WORKLOAD [WORKLOAD ARGS...]
Starts the workload, applies PROFILE (compiled for the guest's own shape),
captures it with `threadwise observe` while attached, reads `threadwise status`,
stops, and writes $THREADWISE_LAB_OUT/results.json and under.duckdb. The host
side (tests/lab/test_placement_lab.py) checks the capture.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runtime_scenarios import sysfs, threadwise, write

OUT = Path(os.environ["THREADWISE_LAB_OUT"])


def main() -> None:
    profile, workload = sys.argv[1], sys.argv[2:]
    results: dict = {"timings": {}, "topology": sibling_lists()}
    started = time.monotonic()
    process = subprocess.Popen([*workload, "--duration", "900"])
    try:
        results["run"] = run = {"apply": threadwise("apply", profile, "--json")}
        if run["apply"]["rc"] == 0:
            capture = OUT / "under.duckdb"
            run["observe"] = threadwise(
                "observe", "--pid", str(process.pid), "-d", "4s", "-o", str(capture), "--force", timeout=600
            )
            run["status"] = threadwise("status", "--json", "--interval", "2")
            run["stop"] = threadwise("stop", "--json")
        run["after"] = sysfs()
    finally:
        process.terminate()
        process.wait()
        if sysfs()["state"] != "disabled":
            threadwise("stop")
    results["timings"]["placement"] = round(time.monotonic() - started, 1)
    write("results.json", results)


def sibling_lists() -> dict[str, str]:
    root = Path("/sys/devices/system/cpu")
    return {
        cpu.name: (cpu / "topology/thread_siblings_list").read_text().strip()
        for cpu in sorted(root.glob("cpu[0-9]*"))
        if (cpu / "topology/thread_siblings_list").exists()
    }


if __name__ == "__main__":
    main()
