"""The lab on a busy host: what other work takes from the lab's vCPUs, with and without host priority.

Question (issue 32): a user's host is rarely idle. Beside a test suite the lab's vCPUs went
20-48% unserved and identical arms spread by +-70%. The lab now claims the host while it
measures (runtime/lab/hostpriority.py: qemu's autogroup and threads at nice -20). Does that hold
the lab's measurements steady beside other work, and what does it cost when two labs meet?

Each run is one ladder with three arms, as the first calibration pool's
(research/2026-12-host-noise/lab_modes.py): `baseline`, `baseline-aa` (the default scheduler
again: the A/A floors) and `exclusive`
(rolesim's record of 2026-11-26, tests/refine/fixtures/records/, for the lab shape: a known
effect, hot-0 on a CPU of its own), in ABBA order, stored in one ladder file (`-o`, committed
under benchmarks/data/ so the judge's calibration re-runs on it without a VM:
`benchmarks/calibration.py --pool FILE`). What ran
beside it (`--beside`):

- `quiet`: nothing (the session's own tools only);
- `burst`: benchmarks/hostburst.py's seeded bursts (1-2 busy processes, 0.5-4 s on, 0.5-6 s off);
- `command`: any command, started in a session of its own and stopped by its PID group at the end
  (`--command 'make -C /root/tw-clone test'`: a test suite of a fresh clone);
- `second-lab`: a second rolesim A/A ladder in the lab, started first, with `--other-priority`;
- `external`: work started elsewhere that outlives this run (`--command` names it, for the
  record only: `--command 'make test of a fresh clone, started 5 min before'`).

The lab's claim (`--host-priority`): `on` (the product's: autogroup + threads at nice -20),
`off`, and two alternatives measured once against it: `cgroup` (the vCPU threads' process in a
cgroup-v1 cpu group of 262144 shares, the most the kernel takes; no nice) and `pin` (each vCPU
thread pinned to a host core of its own; no nice). The alternatives replace the product's claim
for this run only (initramfs.HostClaim is swapped for theirs).

The run's purpose names the setup (`lab-busy beside=... priority=...`); `--summary FILE` prints,
per run: the unserved share of the vCPUs' demand (median, max over cells), the judge's A/A floor
per metric and level at 3 pairs, and the verdicts on the known effect (exclusive against
baseline) per level. Runs from the product's root as:

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/lab_busy.py --calibration \\
        --beside burst --window 10 --repeats 8 --levels 0,2 -o benchmarks/data/lab-calibration-w10.duckdb
    .venv/bin/python benchmarks/lab_busy.py --summary benchmarks/data/lab-calibration-w10.duckdb

The A/A ladders of the busy-host study (runs 1-16) and the speed probe that ran beside some of
them are a dated study now: research/2026-12-host-noise/ (FINDINGS.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from hostburst import BurstyLoad

from threadwise.refine.measure import judge, store
from threadwise.refine.measure.ladder import AA_ARM, BASELINE, Arm
from threadwise.refine.measure.run import arm_from_file, run_ladder, where
from threadwise.refine.measure.workload import load_workload, resolve_workload
from threadwise.runtime.lab import hostload, hostpriority, initramfs

EXCLUSIVE, TWIN, BAD = "exclusive", "baseline-aa2", "bad"
ROOT = Path(__file__).resolve().parents[1]
# rolesim's record of 2026-11-26: its final profile is the calibration pools' `exclusive` arm
OLD_ROLESIM_PROFILE = ROOT / "tests" / "refine" / "fixtures" / "records" / "rolesim-2026-11-26" / \
    "rolesim.not-a-profile.toml"
# A known loss on the worker p99 (the workers wait for a CPU instead of preempting hot-0):
# the veto's power in benchmarks/calibration.py.
BAD_PROFILE = ROOT / "benchmarks" / "data" / "rolesim-worker-nopreempt.toml"
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
MAX_SHARES = 262144


class CgroupClaim(hostpriority.HostClaim):
    """Alternative: qemu's process in a cgroup-v1 cpu group of maximal shares, no nice."""

    def __enter__(self) -> CgroupClaim:
        group = CPU_CGROUP / f"threadwise-lab-{self.leader}"
        group.mkdir()
        (group / "cpu.shares").write_text(f"{MAX_SHARES}\n")
        (group / "cgroup.procs").write_text(f"{self.leader}\n")  # its threads follow, and new ones
        self.applied = f"qemu in the cpu cgroup {group} with cpu.shares {MAX_SHARES} (no nice)"
        self._group = group
        return self

    def __exit__(self, *_exc: object) -> None:
        with contextlib.suppress(OSError):
            (CPU_CGROUP / "cgroup.procs").write_text(f"{self.leader}\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self._group.rmdir()
                return
            except OSError:
                time.sleep(0.2)


class PinClaim(hostpriority.HostClaim):
    """Alternative: each vCPU thread pinned to a host core of its own, no nice."""

    def __enter__(self) -> PinClaim:
        self.applied = "each vCPU thread pinned to a host core of its own (no nice)"
        self._pinned: set[int] = set()
        import threading

        self._thread = threading.Thread(target=self._pin_loop, daemon=True)
        self._thread.start()
        return self

    def _pin_loop(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        while not self._stop.wait(0.2):
            for index, schedstat in enumerate(hostload.vcpu_threads(self.leader)):
                tid = int(schedstat.parent.name)
                if tid not in self._pinned:
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(tid, {cores[index % len(cores)]})
                        self._pinned.add(tid)


CLAIMS = {"cgroup": CgroupClaim, "pin": PinClaim}


@contextlib.contextmanager
def beside(kind: str, *, command: str | None, other_priority: str, seed: int) -> Iterator[str]:
    """Run the other work for the length of the block; yields its label."""
    if kind == "quiet":
        yield "quiet"
    elif kind == "external":
        if not command:
            raise SystemExit("--beside external needs --command (what runs beside, for the record)")
        yield f"external: {command}"
    elif kind == "burst":
        with BurstyLoad(seed=seed) as load:
            yield f"burst seed {seed}"
        print(f"lab-busy: the bursts ran {load.busy_s:.0f} process-s", flush=True)
    elif kind in ("command", "second-lab"):
        if kind == "command":
            if not command:
                raise SystemExit("--beside command needs --command")
            argv, label = ["sh", "-c", command], f"command {command}"
        else:
            other = Path(f"/tmp/threadwise-lab-busy-other-{os.getpid()}.duckdb")
            other.unlink(missing_ok=True)
            argv = [str(ROOT / ".venv/bin/threadwise"), "ladder", "rolesim", "--lab", "--aa",
                    "--levels", "0,2,4", "--repeats", "40", "--window", "3",
                    "--host-priority", other_priority, "-o", str(other)]
            label = f"second lab ({shlex.join(argv[1:])})"
        log = open(f"/tmp/threadwise-lab-busy-beside-{os.getpid()}.log", "wb")  # noqa: SIM115
        other_work = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=ROOT)
        try:
            time.sleep(60 if kind == "second-lab" else 30)  # the other lab boots; the suite gets going
            if other_work.poll() is not None:
                raise SystemExit(f"the work beside ended early (exit {other_work.returncode}); "
                                 f"see {log.name}")
            yield label
        finally:
            _stop_group(other_work.pid)
            log.close()
    else:
        raise SystemExit(f"unknown --beside {kind}")


def _stop_group(pgid: int, grace_s: float = 60.0) -> None:
    """Stop the process group we started: SIGTERM (a threadwise command unwinds and stops its own
    qemu), then SIGKILL whatever of the group is left. The group's leader (a shell) may exit while
    its children (make, pytest) live on: measured, a `make test` outlived its shell's SIGTERM and
    loaded the next run, so the group, not the leader, is waited for."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(-pgid, os.WNOHANG)  # reap the leader, our child
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


def measure(args: argparse.Namespace) -> None:
    path = resolve_workload("rolesim")
    workload = load_workload(path).with_window(args.window)
    product = args.host_priority in ("on", "off")
    place = where(True, 2, host_priority=args.host_priority == "on")
    arms = [Arm(BASELINE), Arm(AA_ARM), arm_from_file(args.profile, place.shape, EXCLUSIVE)]
    if args.calibration:  # the calibration pool's arms (benchmarks/calibration.py)
        arms[2:2] = [Arm(TWIN)]
        arms.append(arm_from_file(BAD_PROFILE, place.shape, BAD))
    os.environ.setdefault("THREADWISE_LAB_TRACE", "off")  # no blocker traces: lab time for cells
    levels = [int(v) for v in args.levels.split(",")]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if not product:
        initramfs.HostClaim = CLAIMS[args.host_priority]  # type: ignore[misc]  # this run only
    if args.nice is not None:
        hostpriority.LAB_NICE = args.nice  # the claim's strength, for this run only
    started = time.monotonic()
    with beside(args.beside, command=args.command, other_priority=args.other_priority,
                seed=args.seed) as label:
        result = run_ladder(workload, path.read_text(), arms, ladder_file=args.output, place=place,
                            levels=levels, repeats=args.repeats, seed=args.seed,
                            purpose=f"lab-busy beside={args.beside} priority={args.host_priority}"
                            + (f" nice={args.nice}" if args.nice is not None else ""),
                            keep_raw=args.keep_raw,
                            command="benchmarks/lab_busy.py " + shlex.join(sys.argv[1:])
                            + f"  # beside: {label}",
                            progress=lambda line: print(line, flush=True))
    print(f"\nrun {result.run_id} in {args.output}: {result.ingested.valid} of {result.ingested.cells} "
          f"cells valid, {time.monotonic() - started:.0f} s")
    print("\n".join(summary(args.output, [result.run_id])))


def summary(path: Path, runs: list[int] | None = None) -> list[str]:
    """Per run: unserved share, A/A floors per metric and level at 3 pairs, the known effect's verdicts."""
    con = store.open_ladder(path, read_only=True)
    lines = []
    try:
        ids = runs or [r[0] for r in con.execute("SELECT run_id FROM run ORDER BY run_id").fetchall()]
        for run_id in ids:
            purpose, priority = con.execute("SELECT purpose, host_priority FROM run WHERE run_id = ?",
                                            [run_id]).fetchone()
            denied = [d for (d,) in con.execute(
                "SELECT host_wait_s / nullif(host_cpu_s + host_wait_s, 0) FROM cell "
                "WHERE run_id = ? AND host_cpu_s IS NOT NULL", [run_id]).fetchall() if d is not None]
            info = store.run_info(con, run_id)
            floors = judge.load_floors(con, run_id)
            lines.append(f"\nrun {run_id}: {purpose}; claim: {priority}")
            if denied:
                lines.append(f"  unserved: median {np.median(denied):.1%}, max {max(denied):.1%} "
                             f"({len(denied)} cells)")
            for metric, _direction in (info.primary, *info.secondary):
                per_level = ", ".join(
                    f"bg{level} {_margin(floors.floor(metric, 3, level))}" for level in info.levels)
                lines.append(f"  A/A floor at 3 pairs, {metric}: {per_level}")
            verdicts = con.execute(
                "SELECT metric, level, ratio, verdict FROM comparison WHERE run_id = ? AND candidate = ? "
                "ORDER BY metric, level", [run_id, EXCLUSIVE]).fetchall()
            for metric, level, ratio, verdict in verdicts:
                shown = "-" if ratio is None else f"{ratio:.3g}x"
                lines.append(f"  {EXCLUSIVE} vs {BASELINE}, {metric} bg{level}: {shown} {verdict}")
    finally:
        con.close()
    return lines


def _margin(log_floor: float | None) -> str:
    return "-" if log_floor is None else f"+-{np.expm1(log_floor):.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beside", choices=("quiet", "burst", "command", "second-lab", "external"),
                        default="quiet")
    parser.add_argument("--command", help="with --beside command: what runs beside the lab; with "
                        "--beside external: what runs beside it, started elsewhere (recorded only)")
    parser.add_argument("--host-priority", choices=("on", "off", *CLAIMS), default="on")
    parser.add_argument("--nice", type=int, help="with --host-priority on: the claim's nice "
                        f"instead of the product's {hostpriority.LAB_NICE}")
    parser.add_argument("--other-priority", choices=("on", "off"), default="on",
                        help="with --beside second-lab: the other lab's --host-priority")
    parser.add_argument("--levels", default="0,2,4")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", type=Path,
                        default=OLD_ROLESIM_PROFILE)
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "build" / "bench" / "lab-busy.duckdb")
    parser.add_argument("--calibration", action="store_true",
                        help=f"also {TWIN} (a third identical arm) and {BAD} ({BAD_PROFILE.name}): the "
                        "calibration pool's arms")
    parser.add_argument("--keep-raw", type=Path, help="keep the run's raw directory here")
    parser.add_argument("--summary", type=Path, help="print the summary of every run in this file and exit")
    args = parser.parse_args()
    if args.summary:
        print("\n".join(summary(args.summary)))
        return
    measure(args)


def _terminate(_signum: int, _frame: object) -> None:
    raise SystemExit(143)  # in the main thread: every `finally` runs, the lab's qemu is stopped by PID


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)  # a plain SIGTERM death left the lab's qemu orphaned
    main()
