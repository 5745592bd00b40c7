"""A fixed-work speed probe on the host beside the lab: can the guest's speed swings be read from outside?

Problem (issue 32): beside other work the default scheduler's hot-0 moved +-15-30% from cell to
cell in the lab with only ~3% of the vCPUs' demand unserved, faster as well as slower than on a
quiet host (docs/lab.md "Beside a fast tier and beside bursts"). This machine is itself a VM: what
one of its CPUs does changes the other's speed. The vCPU threads' host CPU time was tried as a
covariate and rejected, because the arm moves it (benchmarks/host_covariate.py). A reference the
arm cannot move directly is fixed work timed on the host, outside the guest.

Approach: one process per host CPU, pinned to it, in a session (so an autogroup) of its own at
nice -20, the lab's own claim, so that it runs soon after it wakes and takes about 1% of a CPU.
Every `period_s` it runs the same loop of `LOOPS` iterations and records the host's monotonic
time, its CPU, and the loop's time on the CPU (`time.thread_time_ns`: time spent waiting on the
run queue does not count). Its speed is LOOPS / that time. Measured first, alone on this host:
the speed of one 1-ms sample is bimodal (about 23 and 38 million iterations/s, in runs of a few
samples; the thread clock and the wall clock agree on a longer loop), so a cell's index
is time-weighted, not a median: per CPU, the loops of its samples inside the cell's host window
(the guest window through runtime/lab/hostload.py's clock offset) over their CPU time; the
geometric mean over the CPUs. The analysis
(`benchmarks/speed_reference.py`) asks whether that index explains the A/A spread of a cell's
metrics, and whether the arm moves it.

    with SpeedProbe(Path("run-dir")):   # writes run-dir/host-speed.tsv
        ...
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
import time
from pathlib import Path

from threadwise.refine.measure.validity import read_cell
from threadwise.runtime.lab import hostload

SPEED_FILE = "host-speed.tsv"   # host_monotonic_s  cpu  loops  cpu_ns
LOOPS = 20_000                  # about 1 ms of CPython on this host: ~1% of a CPU at 0.1 s
AUTOGROUP_NICE = -20


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
        self.period_s = period_s
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


def cell_speeds(out: Path, *, source: str) -> dict[int, tuple[float, int]]:
    """idx -> (speed index: geometric mean over CPUs of the loops per CPU second of the samples in
    the cell's host window, the fewest samples of any CPU there). Cells without a window or a clock
    offset, or with a CPU that sampled fewer than 5 times, are left out."""
    samples = read_samples(out / SPEED_FILE)
    series = hostload.read_series(out)
    if series is None:
        return {}
    speeds: dict[int, tuple[float, int]] = {}
    for directory in sorted((out / "cells").iterdir()):
        if not (directory / "cell").is_file():
            continue
        raw = read_cell(directory, source=source)
        if not raw.window:
            continue
        start, end = (t + series.offset_s for t in raw.window)
        per_cpu, fewest = [], math.inf
        for points in samples.values():
            inside = [(loops, ns) for t, loops, ns in points if start <= t <= end]
            fewest = min(fewest, len(inside))
            if inside:
                per_cpu.append(sum(loops for loops, _ in inside) / (sum(ns for _, ns in inside) / 1e9))
        if per_cpu and fewest >= 5:
            speeds[raw.idx] = (math.exp(statistics.fmean(math.log(v) for v in per_cpu)), int(fewest))
    return speeds
