"""What each way of claiming the host leaves a claimant beside work that always wants the CPU.

Problem (issue 32, docs/lab.md "The same measure on a quiet host"): with the lab's claim on
(qemu's autogroup and threads at nice -20), a test suite's fast tier beside the lab still made
the workers' p99 noisier at bg=2 (F = 14.5 against a quiet run) while the hot thread's rate was
untouched. Nice -20 against a nice-0 autogroup is a weight of 88,761 against 1,024: other work
that always wants a CPU still gets about 1.1% of each, in turns a scheduler tick long (HZ=250
here: 4 ms), and a 4-ms hole in a vCPU lands whole on a wake chain's tail. A cgroup-v1 cpu group
of 262,144 shares is 256:1 against a nice-0 autogroup; a custom EEVDF slice (sched_setattr's
sched_runtime for SCHED_OTHER, Linux 6.12+) lets a waking claimant preempt at once instead of
after the running task's protected slice. Which of these shortens the holes, measured here,
without a VM?

Approach: a claimant session (its own autogroup, as the lab's qemu) and a competitor session
(nice 0, `stress-ng --cpu N`, the suite's stand-in: it always wants the CPU) run side by side on
the host for `--seconds`, once per claim, rotated over `--repeats` rounds so drift falls on every
claim alike. Two claimant shapes, as a lab guest's vCPUs are at the ladder's levels:
- `busy`: `stress-ng --cpu N` (vCPUs of a guest with background spinners, bg=2): the share of
  its demand the host left waiting (schedstat run_delay / (run + run_delay)) and the mean wait
  per turn on a CPU (run_delay / timeslices);
- `wake`: N processes waking every 1 ms (a sleep of 1 ms) under SCHED_OTHER (vCPUs of an idle
  guest, bg=0, woken by timers): the 99th and 99.9th percentile and the maximum lateness.
The claims are the lab's own classes (runtime/lab/hostpriority.HostClaim, and lab_busy's
CgroupClaim), so what is measured is what the lab applies: `off`, `nice-20` (the product's),
`slice` (the product's and a 0.1-ms custom slice on every thread), `cgroup` (a cpu group of
262,144 shares, no nice) and `cgroup-slice` (both). Measured 2026-12-01 (docs/lab.md "Beside a
fast tier and beside bursts"): the group took 44% less of a busy claimant than nice -20, the
slice nothing; in the lab the group changed neither the unserved share nor the floors.

    .venv/bin/python research/2026-12-host-noise/claim_share.py --seconds 10 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...

from lab_busy import CgroupClaim, _stop_group

from threadwise.runtime.lab import hostpriority

Claim = Callable[[int], contextlib.AbstractContextManager[object]]
WARMUP_S = 1.5  # the claim's first renice pass and the cgroup move land before the counters start


SYS_SCHED_SETATTR = 314  # x86_64
SHORT_SLICE_NS = 100_000  # the shortest custom slice the kernel takes (0.1 ms)


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32),
                ("runtime", ctypes.c_uint64), ("deadline", ctypes.c_uint64),
                ("period", ctypes.c_uint64), ("util_min", ctypes.c_uint32),
                ("util_max", ctypes.c_uint32)]


def set_slice(tid: int, nice: int, slice_ns: int) -> None:
    """SCHED_OTHER at `nice` with a custom EEVDF slice (sched_attr.sched_runtime, Linux 6.12+)."""
    attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), policy=0, nice=nice, runtime=slice_ns)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_SCHED_SETATTR, tid, ctypes.byref(attr), 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


class SliceClaim(hostpriority.HostClaim):
    """The product's claim, and every thread of the session on a 0.1-ms slice (wakes preempt)."""

    def _renice_new(self) -> int:
        before = set(self._reniced)
        done = super()._renice_new()
        for tid in self._reniced - before:  # the threads this pass reniced: one /proc walk, not two
            with contextlib.suppress(OSError):
                set_slice(tid, hostpriority.LAB_NICE, SHORT_SLICE_NS)
        return done


class CgroupSliceClaim(CgroupClaim):
    """lab_busy's cgroup claim, and every thread of the session on a 0.1-ms slice at nice 0."""

    def __enter__(self) -> CgroupSliceClaim:
        super().__enter__()
        self._thread = threading.Thread(target=self._slices, daemon=True)
        self._thread.start()
        return self

    def _slices(self) -> None:
        while not self._stop.wait(0.2):
            for tid in hostpriority.session_threads(self.leader):
                if tid not in self._reniced:
                    with contextlib.suppress(OSError):
                        set_slice(tid, 0, SHORT_SLICE_NS)
                        self._reniced.add(tid)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        super().__exit__(*exc)


def claims() -> dict[str, Claim]:
    return {
        "off": lambda pid: hostpriority.HostClaim(pid, enabled=False),
        "nice-20": hostpriority.HostClaim,
        "slice": SliceClaim,
        "cgroup": CgroupClaim,
        "cgroup-slice": CgroupSliceClaim,
    }


def session_schedstat(leader: int) -> tuple[int, int, int]:
    """Summed (run_ns, wait_ns, timeslices) of every thread in `leader`'s session."""
    run = wait = slices = 0
    for tid in hostpriority.session_threads(leader):
        with contextlib.suppress(OSError, ValueError):
            fields = Path(f"/proc/{tid}/schedstat").read_text().split()
            run, wait, slices = run + int(fields[0]), wait + int(fields[1]), slices + int(fields[2])
    return run, wait, slices


@contextlib.contextmanager
def session(argv: list[str], delay_s: float = 0.5) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` in a session (hence an autogroup) of its own, exec'd after `delay_s` so a claim
    applied to the leader reaches every process it forks; stopped by its process group."""
    shell = ["sh", "-c", f'sleep {delay_s}; exec "$@"', "claimant", *argv]
    proc = subprocess.Popen(shell, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        _stop_group(proc.pid, grace_s=10)


def busy(claim: Claim, seconds: float, cpus: int, tmp: Path) -> dict[str, float]:
    argv = ["stress-ng", "--cpu", str(cpus), "--timeout", f"{seconds + WARMUP_S + 5:.0f}",
            "--temp-path", str(tmp)]
    with session(argv) as proc, claim(proc.pid):
        time.sleep(WARMUP_S)
        run0, wait0, slices0 = session_schedstat(proc.pid)
        time.sleep(seconds)
        run1, wait1, slices1 = session_schedstat(proc.pid)
    waited, ran, turns = wait1 - wait0, run1 - run0, max(slices1 - slices0, 1)
    return {"unserved": waited / max(ran + waited, 1), "wait_per_turn_ms": waited / turns / 1e6}


# One waker: sleeps 1 ms at a time for SECONDS and writes how late each wake came (us -> count).
# cyclictest cannot serve: in a cgroup-v1 cpu group without RT runtime it exits (it sets
# SCHED_FIFO on its main thread whatever --policy says).
WAKER = """
import json, sys, time
seconds, out = float(sys.argv[1]), sys.argv[2]
counts = {}
end = time.monotonic() + seconds
while (now := time.monotonic()) < end:
    time.sleep(0.001)
    late = int((time.monotonic() - now - 0.001) * 1e6)
    counts[late] = counts.get(late, 0) + 1
json.dump(counts, open(out, "w"))
"""


def wake(claim: Claim, seconds: float, cpus: int, tmp: Path) -> dict[str, float]:
    outs = [tmp / f"waker-{i}.json" for i in range(cpus)]
    for out in outs:
        out.unlink(missing_ok=True)
    wakers = " ".join(f'"$0" -c "$1" {seconds:.1f} {out} &' for out in outs)
    argv = ["sh", "-c", f"sleep {WARMUP_S}; {wakers} wait", sys.executable, WAKER]
    with session(argv) as proc, claim(proc.pid):
        proc.wait(timeout=seconds + WARMUP_S + 30)
    counts: dict[int, int] = {}
    for out in outs:
        for late, n in json.loads(out.read_text()).items():
            counts[int(late)] = counts.get(int(late), 0) + n
    return {"p99_us": _quantile(counts, 0.99), "p999_us": _quantile(counts, 0.999),
            "max_us": float(max(counts))}


def _quantile(counts: dict[int, int], q: float) -> float:
    total, seen = sum(counts.values()), 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= q * total:
            return float(bucket)
    return float(max(counts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per cell")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the claims rotate within each")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2,
                        help="claimant and competitor processes each (default: the host's CPUs)")
    parser.add_argument("--claims", default=",".join(claims()), help="which claims, comma-separated")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("claim_share: needs root (the claims write autogroup nice and cgroups)", file=sys.stderr)
        return 2
    chosen = {name: claims()[name] for name in args.claims.split(",")}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tw-claim-share-") as tmp, \
            session(["stress-ng", "--cpu", str(args.cpus), "--temp-path", tmp]):
        time.sleep(2)  # the competitor gets going
        names = list(chosen)
        for repeat in range(args.repeats):
            order = names[repeat % len(names):] + names[:repeat % len(names)]
            for name in order:
                for shape, cell in (("busy", busy), ("wake", wake)):
                    figures = cell(chosen[name], args.seconds, args.cpus, Path(tmp))
                    results.setdefault((shape, name), []).append(figures)
                    shown = ", ".join(f"{k} {v:.3g}" for k, v in figures.items())
                    print(f"round {repeat + 1} {shape:4} {name:8} {shown}", flush=True)
    print(f"\nmedians of {args.repeats} rounds, {args.seconds:.0f}-s cells, "
          f"beside stress-ng --cpu {args.cpus} at nice 0 in its own session:")
    for (shape, name), rows in sorted(results.items()):
        medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"  {shape:4} {name:8} " + ", ".join(
            f"{k} {v:.2%}" if k == "unserved" else f"{k} {v:.3g}" for k, v in medians.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
