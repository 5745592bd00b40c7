"""The host's speed beside the lab: fixed work timed on every host CPU while the guest runs (a
benchmark's probe: `benchmarks/lab_busy.py --speed-probe`).

Problem (issue 32): under TCG the guest does work at the speed of the host CPU its vCPU thread
runs on, and that speed is not constant: on these machines (themselves VMs) it moved +-15-30%
from minute to minute, quiet or not, and the default scheduler's hot-0 moved with it from cell to
cell while the host served 97% of the vCPUs' demand (docs/lab.md "The host's speed as a
covariate"). A share of time (hostload.py) cannot see it. The vCPU threads' host CPU time was
tried as a covariate and rejected, because the arm moves it (host_covariate.py); a
reference the arm does not move is fixed work timed on the host, outside the guest.

Approach: one process per host CPU, pinned to it, in a session (so an autogroup) of its own at
nice -20, the lab's own claim, so that it runs soon after it wakes and takes about 1% of a CPU.
Every `period_s` it runs the same loop of `LOOPS` iterations and records the host's monotonic
time, its CPU, and the loop's time on the CPU (`time.thread_time_ns`: time spent waiting on the
run queue does not count). Its speed is LOOPS / that time. Measured first, alone on this host:
the speed of one 1-ms sample is bimodal (about 23 and 38 million iterations/s, in runs of a few
samples; the thread clock and the wall clock agree on a longer loop), so a cell's index
is time-weighted, not a median: per CPU, the loops of its samples inside the cell's host window
(the guest window through hostload.py's clock offset) over their CPU time; the geometric mean
over the CPUs (`SpeedSeries.window`; per cell: speed_records.py).
speed_reference.py measures whether it explains the A/A spread and whether the arm
moves it; speed_judge.py is a judge that takes it out of each pair.

    with SpeedProbe(Path("run-dir")):   # writes run-dir/host-speed.tsv
        ...
"""

from __future__ import annotations

import bisect
import math
import multiprocessing
import multiprocessing.synchronize
import os
import time
from dataclasses import dataclass
from pathlib import Path

SPEED_FILE = "host-speed.tsv"   # host_monotonic_s  cpu  loops  cpu_ns
LOOPS = 20_000                  # about 1 ms of CPython on this host: ~1% of a CPU at 0.1 s
AUTOGROUP_NICE = -20            # the lab's own claim (hostpriority.py)
MIN_SAMPLES = 5                 # per CPU in a window: fewer gives no index (a 10-s cell has ~100)


def _probe(cpu: int, out: Path, period_s: float, stop: multiprocessing.synchronize.Event) -> None:
    os.setsid()  # an autogroup of its own
    try:
        Path("/proc/self/autogroup").write_text(str(AUTOGROUP_NICE))
        os.setpriority(os.PRIO_PROCESS, 0, AUTOGROUP_NICE)
    except OSError:
        pass  # not root: the probe still times its loop on the CPU; it only samples later
    os.sched_setaffinity(0, {cpu})
    with out.open("a", buffering=1) as sink:
        while not stop.wait(period_s):
            began = time.thread_time_ns()
            total = 0
            for i in range(LOOPS):
                total += i
            took = time.thread_time_ns() - began
            sink.write(f"{time.monotonic():.4f}\t{cpu}\t{LOOPS}\t{took}\n")


class SpeedProbe:
    """Runs one probe per host CPU into `directory/host-speed.tsv` while the block runs."""

    def __init__(self, directory: Path, *, period_s: float = 0.1) -> None:
        self.path = directory / SPEED_FILE
        context = multiprocessing.get_context("fork")
        self._stop = context.Event()
        self._workers = [context.Process(target=_probe, args=(cpu, self.path, period_s, self._stop),
                                         name=f"tw-speed-{cpu}", daemon=True)
                         for cpu in sorted(os.sched_getaffinity(0))]

    def __enter__(self) -> SpeedProbe:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for worker in self._workers:
            worker.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()  # by its own pid


def read_samples(path: Path) -> dict[int, list[tuple[float, int, int]]]:
    """cpu -> [(host monotonic s, loops, CPU ns)] in time order."""
    samples: dict[int, list[tuple[float, int, int]]] = {}
    for line in path.read_text().splitlines():
        t, cpu, loops, ns = line.split("\t")
        if int(ns) > 0:
            samples.setdefault(int(cpu), []).append((float(t), int(loops), int(ns)))
    for series in samples.values():
        series.sort()
    return samples


@dataclass(frozen=True)
class SpeedSeries:
    """One run's probe samples, ready to be cut into host-time windows."""

    samples: dict[int, list[tuple[float, int, int]]]

    def window(self, start: float, end: float) -> tuple[float, int] | None:
        """(the speed index over host monotonic [start, end]: per CPU its samples' loops over
        their CPU time, the geometric mean over the CPUs; the fewest samples of a CPU there), or
        None when a CPU sampled fewer than MIN_SAMPLES times there."""
        per_cpu, fewest = [], math.inf
        for points in self.samples.values():
            lo = bisect.bisect_left(points, (start,))
            hi = bisect.bisect_right(points, (end, math.inf))
            inside = points[lo:hi]
            if len(inside) < MIN_SAMPLES:
                return None
            fewest = min(fewest, len(inside))
            per_cpu.append(sum(loops for _, loops, _ in inside) / (sum(ns for *_, ns in inside) / 1e9))
        if not per_cpu:
            return None
        return math.exp(sum(math.log(v) for v in per_cpu) / len(per_cpu)), int(fewest)


def read_speeds(out: Path) -> SpeedSeries | None:
    """The run's probe samples (None: the run had no probe)."""
    path = out / SPEED_FILE
    if not path.is_file():
        return None
    samples = read_samples(path)
    return SpeedSeries(samples) if samples else None
