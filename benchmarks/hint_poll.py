"""What the runtime's title poll costs: one `TitleHints.poll` over a live PostgreSQL, against `ps`.

While a profile with title groups is applied, the supervisor polls every runtime/hints.POLL_S
(0.25 s): it lists the processes whose comm is the workload's, reads each one's title and writes
a hint where one changed (runtime/hints.py). This measures the steady state, where nothing
changed and nothing is written (the poll's cost on every period), beside the tool a user would
otherwise run to read the same titles, `ps -e -o pid=,args=`, in alternating rounds on one
private PostgreSQL 15 (tests/pgserve.py) with `pgbench -c CONNECTIONS` connected. Both are timed
in wall and CPU time (this process's for the poll, the child's for ps); the poll's share of one
CPU at its period is printed. No sched_ext needed: the hint writer is a counter here (writing
costs one bpf(2) call per task, only when a hint changes). Root (PostgreSQL runs as `postgres`).

usage: .venv/bin/python benchmarks/hint_poll.py [--rounds 20] [--polls 50] [--connections 8]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import pgserve
from tests.conftest import stop_by_pid
from threadwise.runtime.hints import POLL_S, HintPlan, TitleHints

PLAN = HintPlan({"postgres: checkpointer": 1, "postgres: walwriter": 2, "postgres: background writer": 2,
                 "postgres: postgres postgres": 3}, "postgres",
                {1: "checkpointer", 2: "writers", 3: "backends", 1024: "untitled"})


def timed_polls(classifier: TitleHints, polls: int) -> tuple[float, float]:
    """(wall s, CPU s) per poll over `polls` polls."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(polls):
        classifier.poll()
    return (time.perf_counter() - wall0) / polls, (time.process_time() - cpu0) / polls


def timed_ps(runs: int) -> tuple[float, float]:
    """(wall s, CPU s) per `ps -e -o pid=,args=` run (the children's CPU time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    for _ in range(runs):
        subprocess.run(["ps", "-e", "-o", "pid=,args="], capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return (time.perf_counter() - wall0) / runs, cpu / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--polls", type=int, default=50, help="polls (and ps runs) per round")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    if os.geteuid() != 0 or pgserve.missing():
        sys.exit(f"needs root and PostgreSQL 15: {pgserve.missing() or 'run as root'}")
    with pgserve.serving() as (_postmaster, port):
        pgserve.initialize(port)
        load = subprocess.Popen(pgserve.pgbench(port, "-c", str(args.connections), "-j", "1", "-T", "600"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)
            written: list[tuple[int, int]] = []
            classifier = TitleHints(PLAN, lambda tid, hint: written.append((tid, hint)))
            classifier.poll()    # the first poll hints everything: not the steady state
            processes = len(classifier.hinted)
            polls, ps = [], []
            for _ in range(args.rounds):
                polls.append(timed_polls(classifier, args.polls))
                ps.append(timed_ps(args.polls))
        finally:
            stop_by_pid(load)
    poll_wall, poll_cpu = (statistics.median(p[i] for p in polls) for i in (0, 1))
    ps_wall, ps_cpu = (statistics.median(p[i] for p in ps) for i in (0, 1))
    print(f"PostgreSQL with {args.connections} pgbench connections: {processes} processes hinted at the "
          f"first poll ({len(written)} writes); {args.rounds} rounds of {args.polls}")
    print("| what | wall per run (ms, median of rounds) | CPU per run (ms) | ratio to ps (CPU) |")
    print("|---|---|---|---|")
    print(f"| TitleHints.poll (steady state) | {poll_wall * 1e3:.3f} | {poll_cpu * 1e3:.3f} | "
          f"{poll_cpu / ps_cpu:.3f}x |")
    print(f"| ps -e -o pid=,args= | {ps_wall * 1e3:.3f} | {ps_cpu * 1e3:.3f} | 1x |")
    print(f"the poll every {POLL_S:g} s: {poll_cpu / POLL_S * 100:.2f}% of one CPU")


if __name__ == "__main__":
    main()
