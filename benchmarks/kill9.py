"""Reliability benchmark: `threadwise observe` SIGKILLed at random moments, N times.

Problem: a supervisor with a hard timeout kills the observer with SIGKILL. What must hold:
nothing ever appears under the final capture name, the tracer stops with the observer, `clean`
leaves no debris, and what was recorded can be recovered into a capture that passes the
capture's own consistency checks.
Approach: N rounds of `observe` (a real tracer) on a hackbench load, each killed 0.5-7 s after
tracing went live (seeded random moments). Per round it measures, with pidfds, how long the
tracer outlived the observer; then recovers the capture (`observe --recover`), checks it
(opens; every raw event row counted in `events_recorded`; the switch-chain gaps it records are
the breaks in its switch sequence; `end_reason` says recovered; `analyze` accepts it), then runs
`clean` and looks for anything left. It prints the counts and the tracer lifetimes (max, p50).
Needs root. About 12 s a round.

    sudo .venv/bin/python benchmarks/kill9.py 100 [--backend libbpf] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

TRACERS = {"libbpf": "threadwise-sche", "bpftrace": "bpftrace"}
LOAD = ["hackbench", "-g", "4", "-l", "200000"]


def cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          check=False, env=env, cwd=cwd, timeout=timeout)


def wait_exit(fd: int, timeout_s: float) -> float | None:
    """Monotonic time at which the process behind pidfd `fd` exited (None: not within the timeout)."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return time.monotonic() if poller.poll(timeout_s * 1000) else None
    finally:
        os.close(fd)


def tracer_of(observer: int, backend: str) -> int | None:
    try:
        children = Path(f"/proc/{observer}/task/{observer}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == TRACERS[backend]:
                return int(child)
        except OSError:
            continue
    return None


def consistent(path: Path) -> list[str]:
    """The capture's own consistency checks; an empty list when all hold."""
    problems = []
    con = duckdb.connect(str(path), read_only=True)
    try:
        recorded, gaps, reason = con.execute(
            "SELECT events_recorded, switch_gaps, end_reason FROM capture").fetchone()
        rows = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (
            "raw_sched_switch", "raw_sched_waking", "raw_sched_migrate", "raw_task_new",
            "raw_task_exit", "raw_task_rename"))
        breaks = con.execute(
            "SELECT count(*) FROM (SELECT prev_tid, LAG(next_tid) OVER (PARTITION BY cpu ORDER BY ts) "
            "AS before FROM raw_sched_switch) WHERE before IS NOT NULL AND before <> prev_tid").fetchone()[0]
        if rows != recorded:
            problems.append(f"events_recorded {recorded} != raw rows {rows}")
        if gaps != breaks:
            problems.append(f"switch_gaps {gaps} != switch-sequence breaks {breaks}")
        if reason != "recovered":
            problems.append(f"end_reason {reason!r}")
    finally:
        con.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="rounds")
    parser.add_argument("--backend", default="libbpf", choices=sorted(TRACERS))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("error: needs root (tracing)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    final_names = debris = recovered_ok = analyzed_ok = 0
    lifetimes: list[float] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tw-kill9-") as tmp:
        root = Path(tmp)
        temp = root / "tmp"
        temp.mkdir()
        env = {**os.environ, "TMPDIR": str(temp)}
        for index in range(args.n):
            out = root / f"cap-{index}.duckdb"
            at = rng.uniform(0.5, 7.0)
            observer = subprocess.Popen(
                [sys.executable, "-m", "threadwise.cli", "observe", "--backend", args.backend, "-d", "60s",
                 "-o", str(out), "--", *LOAD],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=root)
            assert observer.stderr is not None
            for line in observer.stderr:
                if "tracing live" in line:
                    break
            time.sleep(at)
            tracer = tracer_of(observer.pid, args.backend)
            # pidfds first: they then report the exits however soon they come
            observer_fd = os.pidfd_open(observer.pid)
            tracer_fd = os.pidfd_open(tracer) if tracer else None
            os.kill(observer.pid, signal.SIGKILL)
            observer_gone = wait_exit(observer_fd, 30)
            tracer_gone = wait_exit(tracer_fd, 30) if tracer_fd is not None else None
            observer.wait()
            if tracer_gone is not None and observer_gone is not None:
                lifetimes.append(tracer_gone - observer_gone)
            final_names += out.exists()
            listed = cli("clean", "--keep", str(root), env=env, cwd=root)
            workdirs = [line.split()[1] for line in listed.stdout.splitlines() if "work directory" in line]
            if workdirs:
                done = cli("observe", "--recover", workdirs[0], env=env, cwd=root)
                if done.returncode == 0 and out.exists():
                    problems = consistent(out)
                    if problems:
                        failures.append(f"round {index}: {problems}")
                    else:
                        recovered_ok += 1
                    analyzed = cli("analyze", "--json", str(out), env=env, cwd=root)
                    analyzed_ok += analyzed.returncode == 0 and bool(json.loads(analyzed.stdout or "{}"))
                    out.unlink()
                else:
                    failures.append(f"round {index}: recover failed: {done.stderr.strip()[-300:]}")
            else:
                failures.append(f"round {index}: no work directory to recover ({listed.stdout.strip()})")
            cli("clean", str(root), env=env, cwd=root)
            left = [p for p in root.iterdir() if p.name != "tmp"] + list(temp.iterdir())
            debris += len(left)
            for path in left:
                subprocess.run(["rm", "-rf", str(path)], check=False)
            print(f"round {index + 1}/{args.n}: killed at {at:.1f} s, tracer outlived the observer by "
                  f"{lifetimes[-1] * 1000:.0f} ms" if lifetimes else "", flush=True)
    print()
    print(f"observe --backend {args.backend}, {args.n} SIGKILLs at random moments 0.5-7 s into tracing "
          f"(seed {args.seed}), load: {' '.join(LOAD)}")
    print(f"  files under the final name:              {final_names} of {args.n}")
    print(f"  debris left after clean:                 {debris} files/directories")
    print(f"  recoveries passing the consistency checks: {recovered_ok} of {args.n}")
    print(f"  recoveries analyze accepts:              {analyzed_ok} of {args.n}")
    if lifetimes:
        print(f"  tracer lifetime after the observer died: max {max(lifetimes) * 1000:.0f} ms, "
              f"p50 {statistics.median(lifetimes) * 1000:.0f} ms ({len(lifetimes)} measured)")
    for failure in failures[:10]:
        print(f"  ! {failure}")
    return 0 if not failures and not final_names and not debris else 1


if __name__ == "__main__":
    sys.exit(main())
