"""Runs INSIDE the lab VM (a sched_ext host): `threadwise canary` on a live rolesim service.

usage: canary_scenarios.py ROLESIM BAD GOOD CATCHALL
Three canaries, each on a rolesim started here with its log as the probe:
- bad: workers that starve (a ladder measured their p99 3.8-6.2x worse at bg=0): rolled back;
- good: hot-0 on a CPU of its own, with two spinners beside it (a ladder measured it better on both
  metrics at bg 2): kept, then stopped with `threadwise stop`;
- catch-all: the profile is scx_layered's catch-all alone: never `better`.
Writes $THREADWISE_LAB_OUT/results.json (tests/lab/test_canary_lab.py asserts on it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ["THREADWISE_LAB_OUT"])
HERE = Path(__file__).parent


def threadwise(*args: str, timeout: float = 1200) -> dict:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
            "seconds": round(time.monotonic() - started, 1)}


def sysfs_state() -> str:
    return Path("/sys/kernel/sched_ext/state").read_text().strip()


def start_rolesim(binary: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        service = subprocess.Popen([binary, "--hot", "1", "--workers", "2", "--report-ms", "500"],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while b"rolesim: ready" not in log.read_bytes():
        if time.monotonic() > deadline or service.poll() is not None:
            raise RuntimeError(f"rolesim did not get ready: {log.read_text(errors='replace')[-500:]}")
        time.sleep(0.2)
    return service


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)   # ours: its own session, by its PID
    process.wait()


def canary(name: str, binary: str, profile: str, *, spinners: int, max_duration: str) -> dict:
    log = OUT / f"{name}.log"
    service = start_rolesim(binary, log)
    background = [subprocess.Popen([sys.executable, str(HERE / "spinner.py"), "bg-spin", "3600"],
                                   start_new_session=True) for _ in range(spinners)]
    try:
        ran = threadwise("canary", profile, "--workload", "rolesim", "--pid", str(service.pid),
                         "--probe-log", str(log), "--window", "2s", "--warmup", "1s",
                         "--windows-per-visit", "3", "--attach-timeout", "240s",
                         "--max-duration", max_duration, "--shape", "cores=2,threads-per-core=1",
                         "-o", str(OUT / f"{name}.duckdb"))
        ran["state_after"] = sysfs_state()
        if ran["state_after"] != "disabled":
            ran["stop"] = threadwise("stop")
            ran["state_after_stop"] = sysfs_state()
    finally:
        for process in [*background, service]:
            stop(process)
    return ran


def main() -> None:
    binary, bad, good, catch_all = sys.argv[1:5]
    results: dict[str, object] = {}
    for name, profile, spinners, max_duration in (("bad", bad, 0, "8m"), ("good", good, 2, "8m"),
                                                  ("catch_all", catch_all, 0, "3m")):
        try:
            results[name] = canary(name, binary, profile, spinners=spinners, max_duration=max_duration)
        except Exception as error:
            results[name] = {"error": repr(error)}
        (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
