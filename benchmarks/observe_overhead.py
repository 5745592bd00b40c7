"""Benchmark: what tracing with `threadwise observe` costs a workload, and what it records.

Runs hackbench (rt-tests) untraced and traced, interleaved (A, B, A, B, ...)
so both arms see the same machine state, and prints per-pair time ratios,
their median, events per second recorded and events lost. Needs root.

    sudo .venv/bin/python benchmarks/observe_overhead.py --pairs 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from threadwise.observe.capture import observe
from threadwise.observe.target import Target

HACKBENCH = ["hackbench", "-g", "4", "-l", "2000"]


def _hackbench_seconds(output: str) -> float:
    match = re.search(r"Time:\s*([\d.]+)", output)
    if not match:
        raise RuntimeError(f"hackbench printed no time: {output!r}")
    return float(match.group(1))


def untraced() -> float:
    result = subprocess.run(HACKBENCH, capture_output=True, text=True, check=True)
    return _hackbench_seconds(result.stdout)


def traced(workdir: Path, index: int) -> tuple[float, float, int]:
    out = workdir / f"traced-{index}.duckdb"
    log = workdir / f"hackbench-{index}.txt"
    command = ["sh", "-c", f"{' '.join(HACKBENCH)} > {log}"]
    target = Target.from_options(pid=None, comm=None, cgroup=None, command=command)
    result = observe(target, out, duration_s=None, progress=lambda _m: None)
    return _hackbench_seconds(log.read_text()), result.events_per_s, result.events_lost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="untraced/traced pairs (default 5)")
    args = parser.parse_args()
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
        print(f"{'pair':>4} {'untraced s':>10} {'traced s':>9} {'ratio':>6} {'events/s':>9} {'lost':>6}")
        for index in range(args.pairs):
            base = untraced()
            seconds, rate, lost = traced(Path(tmp), index)
            ratios.append(seconds / base)
            print(f"{index:>4} {base:>10.3f} {seconds:>9.3f} {seconds / base:>6.2f} {rate:>9,.0f} {lost:>6}")
    print(f"median traced/untraced time ratio: {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
