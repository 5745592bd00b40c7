"""Bursty host load, reproducible: what a test suite or another lab VM does to the lab's vCPUs.

LAB.md measured that steady host load hardly moves a lab ladder (within +-2.5%) while
bursty load (a test suite, other VMs starting and stopping) spreads identical cells by
2x. This makes that second condition on demand: `burst` seeded bursts, each starting
1-2 busy processes for 0.5-4 s, with 0.5-6 s pauses between them. Children are ours,
stopped by PID (never by name).

    python benchmarks/hostburst.py --seconds 600 --seed 1      # or as a context in Python
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import threading
import time
from types import TracebackType


def _spin(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


class BurstyLoad:
    """A thread that runs seeded bursts of busy child processes until stopped."""

    def __init__(self, *, seed: int = 1, max_procs: int = 2, burst_s: tuple[float, float] = (0.5, 4.0),
                 pause_s: tuple[float, float] = (0.5, 6.0)) -> None:
        self.random = random.Random(seed)
        self.max_procs = max_procs
        self.burst_s, self.pause_s = burst_s, pause_s
        self.busy_s = 0.0  # process-seconds of load started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tw-hostburst", daemon=True)
        self._children: list[int] = []

    def __enter__(self) -> BurstyLoad:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for pid in self._children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

    def _run(self) -> None:
        while not self._stop.wait(self.random.uniform(*self.pause_s)):
            procs = self.random.randint(1, self.max_procs)
            length = self.random.uniform(*self.burst_s)
            pids = []
            for _ in range(procs):
                pid = os.fork()
                if pid == 0:  # child: spin for the burst, then leave without cleanup handlers
                    _spin(time.monotonic() + length)
                    os._exit(0)
                pids.append(pid)
            self._children = pids
            for pid in pids:
                os.waitpid(pid, 0)
            self._children = []
            self.busy_s += procs * length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with BurstyLoad(seed=args.seed) as load:
        time.sleep(args.seconds)
    print(f"hostburst: {load.busy_s:.0f} process-seconds of load in {args.seconds:.0f} s")


if __name__ == "__main__":
    main()
