"""Benchmark: where `threadwise observe`'s own CPU goes while a hackbench run is traced.

Problem: on 2 cores every CPU second the observer spends while the workload runs is taken from
the workload; tracer_overhead.py shows the full observer costing more than the tracer binary
alone, but not which part of the observer it is.
Approach: run `observe` in-process (libbpf backend) on `hackbench -g 4 -l 2000`, and use the
progress lines as phase marks: from "tracing live" to "stopping" is the live phase, the one the
workload pays for. Over it, record the observer's own CPU (getrusage: every thread of this
process), the tracer child's CPU (/proc/PID/stat, read before it is stopped), wall time, and
with --profile a cProfile of the main thread's poll loop (top functions by cumulative time).
Finalize (after the workload ended) is reported apart: it costs the user time, not the workload.

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/observer_cpu.py [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from threadwise.observe.capture import observe
from threadwise.observe.libbpf_backend import LibbpfBackend
from threadwise.observe.target import Target

HACKBENCH = "hackbench -g 4 -l 2000"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    wall_s: float = 0.0
    observer_cpu_s: float = 0.0   # user + sys of this process, all threads
    tracer_cpu_s: float = 0.0     # user + sys of the tracer child


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK   # utime, stime (fields 14, 15)


def one_run(work: Path, index: int, profiler: cProfile.Profile | None) -> tuple[Phase, Phase, float]:
    backend = LibbpfBackend()
    live, final = Phase(), Phase()
    marks: dict[str, tuple[float, float]] = {}

    def progress(message: str) -> None:
        if "tracing live" in message:
            marks["live"] = (time.monotonic(), _cpu_self())
            if profiler:
                profiler.enable()
        elif "stopping" in message:
            if profiler:
                profiler.disable()
            now, cpu = time.monotonic(), _cpu_self()
            live.wall_s, live.observer_cpu_s = now - marks["live"][0], cpu - marks["live"][1]
            assert backend._proc is not None
            live.tracer_cpu_s = _cpu_of(backend._proc.pid)
            marks["stop"] = (now, cpu)

    log = work / f"hackbench-{index}.txt"
    target = Target.from_options(pid=None, comm=None, cgroup=None,
                                 command=["sh", "-c", f"exec {HACKBENCH} > {log}"])
    observe(target, work / f"cap-{index}.duckdb", duration_s=None, backend=backend, progress=progress)
    final.wall_s = time.monotonic() - marks["stop"][0]
    final.observer_cpu_s = _cpu_self() - marks["stop"][1]
    (work / f"cap-{index}.duckdb").unlink()
    seconds = float(log.read_text().split("Time:")[1].split()[0])
    return live, final, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile the live phase's poll loop")
    args = parser.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    rows = []
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="tw-observer-cpu-") as tmp:
        for index in range(args.rounds):
            live, final, seconds = one_run(Path(tmp), index, profiler)
            rows.append((live, final, seconds))
            print(f"round {index + 1}: hackbench {seconds:.3f} s; live {live.wall_s:.2f} s wall, "
                  f"observer {live.observer_cpu_s:.3f} s CPU "
                  f"({100 * live.observer_cpu_s / live.wall_s:.1f}% of one core), tracer "
                  f"{live.tracer_cpu_s:.3f} s CPU; after the workload: {final.wall_s:.2f} s wall, "
                  f"observer {final.observer_cpu_s:.2f} s CPU", flush=True)
    print(f"median: observer {statistics.median(r[0].observer_cpu_s for r in rows):.3f} s CPU live, "
          f"tracer {statistics.median(r[0].tracer_cpu_s for r in rows):.3f} s, hackbench "
          f"{statistics.median(r[2] for r in rows):.3f} s; load average at end {os.getloadavg()[0]:.2f}")
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
