"""How much the host took from the lab guest's vCPUs during each cell.

Problem: under multi-threaded TCG a guest vCPU is a host thread. When the
host is busy in bursts (a test suite, another lab VM starting), a vCPU thread
waits on the host's run queue and the guest simply runs slower for a while;
inside the guest that is indistinguishable from the scheduler under test
doing badly (LAB.md: the same default-scheduler cell read 980-1778 chunks/s
under bursty host load, within +-2.5% under steady load). A ladder must tell
such cells apart instead of guessing from the spread.

Approach: while qemu runs, `VcpuSampler` reads the vCPU threads' (`CPU n/TCG`)
`/proc/PID/task/TID/schedstat` every `period_s`: the first two fields are the
time the thread ran and the time it waited on a host run queue (ns). The
guest's init prints its uptime on the console once a second (`TWCLOCK:`), and
the host stamps each such line on arrival, so a guest time maps to a host
time (`offset = min(host - guest)`: a line can only arrive late, never early;
multi-threaded TCG's guest clock follows the host's, so one offset holds for
the run). Each cell's window (guest uptime, the agent's `wall` file) is mapped
to host time and the two counters are interpolated there: the vCPUs ran
`host_cpu_s` and waited `host_wait_s` in that window. `denied_share` =
wait / (run + wait) is the share of what the guest asked of the host that it
did not get. Steady load denies both cells of a pair alike and cancels in a
paired ratio; the judge drops pairs whose cells were denied unequally
(refine/measure/stats.py). Raw series stay in the run directory (`host-vcpus.tsv`,
`host-clock.tsv`), so the numbers can be recomputed.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from pathlib import Path

VCPUS_FILE = "host-vcpus.tsv"  # host_monotonic_s  run_ns  wait_ns  threads
CLOCK_FILE = "host-clock.tsv"  # host_monotonic_s  guest_uptime_s


def vcpu_threads(pid: int) -> list[Path]:
    """The schedstat files of qemu's vCPU threads (named `CPU n/TCG` under TCG, `CPU n/KVM` else)."""
    found = []
    try:
        tasks = sorted(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("CPU ") and "/" in comm:
            found.append(task / "schedstat")
    return found


def read_counters(files: list[Path]) -> tuple[int, int] | None:
    """Summed (run_ns, wait_ns) of the threads still alive (None: none is)."""
    run = wait = 0
    alive = False
    for path in files:
        try:
            fields = path.read_text().split()
        except OSError:
            continue
        run, wait, alive = run + int(fields[0]), wait + int(fields[1]), True
    return (run, wait) if alive else None


class VcpuSampler:
    """Samples qemu's vCPU threads' run and wait time every `period_s` until stopped."""

    def __init__(self, pid: int, *, period_s: float = 0.2) -> None:
        self.pid = pid
        self.period_s = period_s
        self.samples: list[tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tw-vcpu-sampler", daemon=True)

    def __enter__(self) -> VcpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        files: list[Path] = []
        while not self._stop.is_set():
            if len(files) == 0:  # the vCPU threads appear a moment after qemu starts
                files = vcpu_threads(self.pid)
            counters = read_counters(files) if files else None
            if counters is not None:
                self.samples.append((time.monotonic(), *counters, len(files)))
            self._stop.wait(self.period_s)


def write_series(out: Path, samples: list[tuple[float, int, int, int]],
                 clock: list[tuple[float, float]]) -> None:
    """The raw series of one boot, beside the agent's raw files."""
    (out / VCPUS_FILE).write_text("".join(f"{t:.4f}\t{r}\t{w}\t{n}\n" for t, r, w, n in samples))
    (out / CLOCK_FILE).write_text("".join(f"{h:.4f}\t{g:.2f}\n" for h, g in clock))


@dataclass(frozen=True)
class HostSeries:
    """One run's host-side series, ready to be cut into cell windows."""

    times: list[float]
    run_ns: list[int]
    wait_ns: list[int]
    offset_s: float  # host monotonic = guest uptime + offset

    def window(self, guest_start: float, guest_end: float) -> tuple[float, float] | None:
        """(run_s, wait_s) of the vCPUs over a guest-time window (None: not covered by samples)."""
        start, end = guest_start + self.offset_s, guest_end + self.offset_s
        if not self.times or start < self.times[0] or end > self.times[-1] or end <= start:
            return None
        run = self._at(self.run_ns, end) - self._at(self.run_ns, start)
        wait = self._at(self.wait_ns, end) - self._at(self.wait_ns, start)
        return run / 1e9, wait / 1e9

    def _at(self, values: list[int], t: float) -> float:
        i = bisect.bisect_right(self.times, t)
        if i >= len(self.times):
            return float(values[-1])
        if i == 0:
            return float(values[0])
        t0, t1 = self.times[i - 1], self.times[i]
        share = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
        return values[i - 1] + share * (values[i] - values[i - 1])


def read_series(out: Path) -> HostSeries | None:
    """The run's series (None: the cells did not run in an initramfs guest, or it sent no clock)."""
    try:
        vcpu_lines = (out / VCPUS_FILE).read_text().splitlines()
        clock_lines = (out / CLOCK_FILE).read_text().splitlines()
    except OSError:
        return None
    times, run, wait = [], [], []
    for line in vcpu_lines:
        t, r, w, _n = line.split("\t")
        times.append(float(t))
        run.append(int(r))
        wait.append(int(w))
    pairs = [tuple(float(v) for v in line.split("\t")) for line in clock_lines if line.strip()]
    if len(times) < 2 or not pairs:
        return None
    offset = min(host - guest for host, guest in pairs)
    return HostSeries(times, run, wait, offset)


def denied_share(run_s: float | None, wait_s: float | None) -> float | None:
    """Share of the vCPUs' demand the host did not serve: wait / (run + wait)."""
    if run_s is None or wait_s is None or run_s + wait_s <= 0:
        return None
    return wait_s / (run_s + wait_s)
