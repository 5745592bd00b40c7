"""Benchmark: what tracing costs a workload, threadwise's backends against `perf sched record`.

Problem: a tracer is only usable on a production service if it costs about what the kernel's
own tool costs. Timed tests cannot show that; runs side by side on the same machine can.
Approach: rounds of arms, the arm order rotated every round so no arm always runs first or
after the same neighbour: untraced; `perf sched record` (system-wide, the tool a user would
otherwise run); threadwise with the libbpf tracer (one ring per CPU, and one shared ring); and
threadwise with bpftrace. Two workloads: hackbench (switch-heavy; the ratio is hackbench's own
time against the untraced run of the same round) and Redis on loopback under redis-benchmark
(the ratio is the traced arm's requests/s against the untraced one's). For each arm it prints
the median ratio with its range, events recorded per second, and events lost: for threadwise
the tracer's exact drops (libbpf) apart from the switch-chain gaps of the kernel's own stream.
Needs root. Takes about 10 minutes with the defaults.

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/tracer_overhead.py [--rounds 5]
        [--workloads hackbench,redis] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from results import stamp, write_section

from threadwise.observe import tracer_build
from threadwise.observe.capture import observe
from threadwise.observe.libbpf_backend import LibbpfBackend
from threadwise.observe.target import Target

HACKBENCH = ["hackbench", "-g", "4", "-l", "2000"]
REDIS_REQUESTS = 300_000
# libbpf-raw: the C tracer alone, writing its record files, no observer (no ingest, no /proc
# scans): what the kernel side and the record writer cost, apart from threadwise's Python side.
ARMS = ("untraced", "perf", "libbpf-raw", "libbpf", "libbpf-1ring", "bpftrace")


@dataclass
class Run:
    value: float               # hackbench seconds, or redis requests/s
    events_per_s: float = 0.0
    dropped: int | None = None  # tracer drops (None: untraced)
    gaps: int | None = None     # switch-chain gaps of the kernel stream (threadwise only)


@dataclass
class Arm:
    name: str
    runs: list[Run] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


def _hackbench_seconds(text: str) -> float:
    match = re.search(r"Time:\s*([\d.]+)", text)
    if not match:
        raise RuntimeError(f"hackbench printed no time: {text!r}")
    return float(match.group(1))


def _perf_record(argv_tail: list[str], out: Path, *, stop: Callable[[], None] | None = None,
                 run: Callable[[], float] | None = None) -> tuple[float, float, int]:
    """perf sched record around a command (argv_tail) or, with `run`, system-wide while run() runs."""
    started = time.monotonic()
    if run is None:
        done = subprocess.run(["perf", "sched", "record", "-o", str(out), "--", *argv_tail],
                              capture_output=True, text=True, check=True)
        value, stderr = _hackbench_seconds(done.stdout), done.stderr
    else:
        perf = subprocess.Popen(["perf", "sched", "record", "-a", "-o", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)   # perf has no "live" line; give it time to open its buffers
        value = run()
        perf.send_signal(signal.SIGINT)
        _out, stderr = perf.communicate(timeout=120)
    elapsed = time.monotonic() - started
    samples = re.search(r"\((\d+) samples\)", stderr)
    lost = sum(int(n) for n in re.findall(r"lost (\d+) chunks", stderr)) + \
        sum(int(n) for n in re.findall(r"LOST (\d+) events", stderr))
    events = int(samples.group(1)) if samples else 0
    return value, events / elapsed if elapsed else 0.0, lost


def _threadwise(arm: str, target: Target, out: Path) -> tuple[float, int, int]:
    backend = (LibbpfBackend() if arm == "libbpf" else LibbpfBackend(rings=1) if arm == "libbpf-1ring"
               else None)
    result = observe(target, out, duration_s=None, backend_name="bpftrace", backend=backend,
                     progress=lambda _m: None)
    return result.events_per_s, result.events_lost - result.switch_gaps, result.switch_gaps


def _raw_tracer(work: Path, run: Callable[[], float]) -> Run:
    """The libbpf tracer binary alone around run(): its record files, no observer."""
    out = work / "raw-records"
    out.mkdir(exist_ok=True)
    tracer = subprocess.Popen([str(tracer_build.binary_path()), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert tracer.stdout is not None
    live = tracer.stdout.readline()
    if not live.startswith("live "):
        detail = tracer.stderr.read() if tracer.stderr else ""
        raise RuntimeError(f"the tracer did not start: {live!r} {detail}")
    started = time.monotonic()
    value = run()
    elapsed = time.monotonic() - started
    tracer.send_signal(signal.SIGINT)
    stdout, _stderr = tracer.communicate(timeout=60)
    counts = json.loads(next(line for line in stdout.splitlines() if line.startswith("counts "))[7:])
    seen = sum(v["seen"] for k, v in counts.items() if isinstance(v, dict) and "seen" in v and k != "seen")
    dropped = sum(v["dropped"] for v in counts.values() if isinstance(v, dict) and "dropped" in v)
    shutil.rmtree(out, ignore_errors=True)
    return Run(value, seen / elapsed if elapsed else 0.0, dropped)


def hackbench_run(arm: str, work: Path, index: int) -> Run:
    if arm == "untraced":
        done = subprocess.run(HACKBENCH, capture_output=True, text=True, check=True)
        return Run(_hackbench_seconds(done.stdout))
    if arm == "perf":
        seconds, rate, lost = _perf_record(HACKBENCH, work / f"perf-{index}.data")
        (work / f"perf-{index}.data").unlink(missing_ok=True)
        return Run(seconds, rate, lost)
    if arm == "libbpf-raw":
        return _raw_tracer(work, lambda: _hackbench_seconds(
            subprocess.run(HACKBENCH, capture_output=True, text=True, check=True).stdout))
    log = work / f"hackbench-{arm}-{index}.txt"
    target = Target.from_options(pid=None, comm=None, cgroup=None,
                                 command=["sh", "-c", f"exec {' '.join(HACKBENCH)} > {log}"])
    out = work / f"{arm}-{index}.duckdb"
    rate, dropped, gaps = _threadwise(arm, target, out)
    out.unlink(missing_ok=True)
    return Run(_hackbench_seconds(log.read_text()), rate, dropped, gaps)


class Redis:
    """Our own redis-server on loopback, stopped by its PID."""

    def __init__(self, work: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(work), "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not listen")

    def load(self) -> float:
        """requests/s of a SET+GET run of redis-benchmark (mean of the two)."""
        done = subprocess.run(
            ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-c", "50", "-n",
             str(REDIS_REQUESTS), "-t", "set,get", "--csv"], capture_output=True, text=True, check=True)
        rates = [float(line.split(",")[1].strip('"')) for line in done.stdout.splitlines()
                 if line.startswith('"SET"') or line.startswith('"GET"')]
        return statistics.mean(rates)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def redis_run(arm: str, work: Path, index: int, redis: Redis) -> Run:
    if arm == "untraced":
        return Run(redis.load())
    if arm == "perf":
        data = work / f"perf-redis-{index}.data"
        value, rate, lost = _perf_record([], data, run=redis.load)
        data.unlink(missing_ok=True)
        return Run(value, rate, lost)
    if arm == "libbpf-raw":
        return _raw_tracer(work, redis.load)
    out = work / f"redis-{arm}-{index}.duckdb"
    cli = [sys.executable, "-m", "threadwise.cli", "observe", "--pid", str(redis.proc.pid),
           "--backend", "bpftrace" if arm == "bpftrace" else "libbpf", "-o", str(out)]
    observer = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert observer.stderr is not None
    for line in observer.stderr:
        if "tracing live" in line:
            break
    value = redis.load()
    observer.send_signal(signal.SIGINT)
    _stdout, stderr = observer.communicate(timeout=300)
    match = re.search(r"\(([\d,]+)/s\), ([\d,]+) lost \(([\d,]+) switch-chain gaps\)", _stdout + stderr)
    if match is None:
        raise RuntimeError(f"observe printed no summary line: {(_stdout + stderr)[-500:]}")
    rate, lost, gaps = (float(match.group(1).replace(",", "")), int(match.group(2).replace(",", "")),
                        int(match.group(3).replace(",", "")))
    out.unlink(missing_ok=True)
    return Run(value, rate, lost - gaps, gaps)


def _fmt_lost(runs: list[Run]) -> str:
    dropped = [r.dropped for r in runs if r.dropped is not None]
    gaps = [r.gaps for r in runs if r.gaps is not None]
    text = f"{min(dropped):,}-{max(dropped):,}" if dropped else "-"
    if gaps:
        text += f" (+ {min(gaps):,}-{max(gaps):,} gaps)"
    return text


def report(workload: str, arms: dict[str, Arm], *, higher_is_better: bool) -> list[str]:
    unit = "requests/s ratio (traced/untraced)" if higher_is_better else "time ratio (traced/untraced)"
    lines = [f"### {workload}: {unit}", "",
             "| arm | median ratio | range | events/s recorded "
             "| lost per run (tracer drops; kernel-stream gaps) |",
             "|---|---|---|---|---|"]
    for name, arm in arms.items():
        if name == "untraced" or not arm.ratios:
            continue
        rates = [r.events_per_s for r in arm.runs]
        lines.append(f"| {name} | {statistics.median(arm.ratios):.3f} | {min(arm.ratios):.3f}-"
                     f"{max(arm.ratios):.3f} | {statistics.median(rates):,.0f} | {_fmt_lost(arm.runs)} |")
    base = [r.value for r in arms["untraced"].runs]
    lines.append("")
    lines.append(f"untraced: median {statistics.median(base):,.3f} "
                 f"{'requests/s' if higher_is_better else 's'} over {len(base)} rounds")
    return lines


def run_workload(name: str, rounds: int, work: Path, arm_names: list[str]) -> list[str]:
    arms = {a: Arm(a) for a in arm_names}
    redis = Redis(work) if name == "redis" else None
    try:
        for index in range(rounds):
            order = arm_names[index % len(arm_names):] + arm_names[:index % len(arm_names)]
            results: dict[str, Run] = {}
            for arm in order:
                results[arm] = (redis_run(arm, work, index, redis) if redis else
                                hackbench_run(arm, work, index))
                arms[arm].runs.append(results[arm])
            base = results["untraced"].value
            for arm, run in results.items():
                if arm != "untraced":
                    arms[arm].ratios.append(run.value / base)
            print(f"{name} round {index + 1}/{rounds}: " + ", ".join(
                f"{a} {results[a].value:,.3f}" for a in arm_names), flush=True)
    finally:
        if redis:
            redis.stop()
    table = report(name, arms, higher_is_better=name == "redis")
    print("\n".join(table), flush=True)
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", default="hackbench,redis")
    parser.add_argument("--write-results", action="store_true",
                        help="also write the tables into benchmarks/RESULTS.md (section tracer_overhead)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("error: needs root (tracing)", file=sys.stderr)
        return 2
    # The Redis arms stop `threadwise observe` with SIGINT. Started in the background of a
    # non-interactive shell, this process inherits SIGINT ignored and so would every observer
    # (Python keeps an inherited SIG_IGN): it never stopped and the run hung. A handler here is
    # reset to the default in each child at exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for tool in ("hackbench", "perf", "redis-server", "redis-benchmark", "bpftrace"):
        if shutil.which(tool) is None:
            print(f"error: {tool} not found (scripts/setup-system.sh installs it)", file=sys.stderr)
            return 2
    sections: list[str] = []
    stamp_text = stamp(" ".join(["benchmarks/tracer_overhead.py", *sys.argv[1:]]))
    with tempfile.TemporaryDirectory(prefix="tw-tracer-bench-") as tmp:
        for workload in args.workloads.split(","):
            names = list(ARMS) if workload == "hackbench" else [a for a in ARMS if a != "libbpf-1ring"]
            sections += [*run_workload(workload, args.rounds, Path(tmp), names), ""]
    if args.write_results:
        write_section("tracer_overhead", "\n".join([
            "## Tracer overhead (issue 10): threadwise's tracers against `perf sched record`", "",
            stamp_text, f"Load average at the end: {os.getloadavg()[0]:.1f} (1 min): anything else "
            "running on the machine widens the ranges.", "",
            f"hackbench: `{' '.join(HACKBENCH)}`; redis: redis-benchmark -c 50 -n {REDIS_REQUESTS} "
            "-t set,get on loopback. perf: `perf sched record` (system-wide). libbpf: threadwise observe "
            "with one ring per CPU (the default); libbpf-1ring: one shared ring; libbpf-raw: the tracer "
            "binary alone (no observer, no ingest); bpftrace: threadwise observe --backend bpftrace. "
            "Arm order rotates every round.", "", *sections]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
