"""What makes a ladder cell valid: the comparison it claims really happened.

Problem: a cell can produce a plausible number while measuring something
else: the background spinners never ran (a flat ladder that looks like a
robust profile, LAB.md), the load generator saturated its own CPU (the number
is the generator's limit, not the service's), the service died, the
scheduler was not attached (or was, in a baseline cell), or the profile's
threads sat in the wrong layer (scx_layered re-matches a renamed thread only
when it next wakes; the profile then measures as worse than none).

Approach: read the agent's raw files of one cell into `CellRaw`, then judge it
with explicit thresholds; each failure is a short reason kept with the cell.
Nothing here computes a statistic; invalid cells stay in the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The background must have run as a competitor. Under the default scheduler (baseline cells) it
# must get at least a quarter of min(level, CPUs - 1) CPUs over the window: that catches a
# background that never ran (LAB.md: stress-ng aborting in the guest burns ~0). Not "each
# spinner at 80%": two spinners fairly sharing 2 vCPUs with rolesim get ~63% each.
# In a profile cell the rule must not judge the scheduler under test: measured in the 2-vCPU
# lab, scx_layered 1.1.4 with one exclusive CPU gave two runnable spinners 0.23-0.37 CPU. That
# starvation is the profile's own effect, a result shown in "background CPUs got", so a profile
# cell is invalid only when its spinners did not run at all (no reading, or below
# SPINNER_ALIVE_CPUS of CPU: a process that started and spun burns far more in a window), unless
# their threads were runnable for most of the window (at least SPINNER_RUNNABLE_SHARE of level x
# window: state R at both ends, or ran + waited by schedstat): then the profile starved a
# background that was there, which is its result too. Measured: Redis profiles that give its
# threads the CPU left the spinners 0.05-0.11 s of CPU in 8-9 s (2026-11-26), which the CPU rule
# alone called "never ran".
SPINNER_MIN_CPUS_SHARE = 0.25
SPINNER_ALIVE_CPUS = 0.02
SPINNER_RUNNABLE_SHARE = 0.5
GENERATOR_MAX_SHARE = 0.90  # generator CPU < 90% of one CPU over the window


@dataclass
class CellRaw:
    """One cell's raw files, parsed (None: the file is missing)."""

    idx: int
    arm: str
    level: int
    repeat: int
    done: bool
    wall_s: float | None = None
    window: tuple[float, float] | None = None  # the window's start and end, guest uptime seconds
    spinner_cpu_s: float | None = None
    spinner_runnable_s: float | None = None  # the spinners' threads: runnable time in the window, summed
    generator_cpu_s: float | None = None
    state_before: str | None = None
    state_after: str | None = None
    alive_before: str | None = None
    alive_after: str | None = None
    load_rc: int | None = None
    scx_cpu_s: float | None = None  # scx_layered's own process (userspace) in the window
    service_cpu_s: float | None = None  # the service process, all its threads
    busy_cpu_s: float | None = None  # all CPUs' non-idle time in the window
    membership_error: str | None = None
    mismatched: list[str] = field(default_factory=list)  # "comm (tid N): expected X, in Y"
    members: int = 0  # target threads checked


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def times_children_s(text: str) -> float:
    """Children's user+sys seconds from the POSIX `times` output (its second line)."""
    line = text.strip().splitlines()[-1]
    total = 0.0
    for part in line.split():
        minutes, _, seconds = part.rstrip("s").partition("m")
        total += float(minutes) * 60 + float(seconds)
    return total


def times_total_s(text: str) -> float:
    """The shell's own and its children's user+sys seconds from the POSIX `times` output."""
    return sum(times_children_s(line) for line in text.strip().splitlines())


def _probe_cpu_s(directory: Path) -> float:
    """The mid-window membership probe's CPU, which the shell's child times include.

    `times.probe` is the probe subshell's own `times` (agent.sh), whatever else the shell reaped
    meanwhile. Raw directories from before it (`times.mid0`/`times.mid1` around the probe) give
    the change of the shell's child times, which also holds a generator that exited during the
    probe: 30 of the 260 cells of the Redis record of 2026-11-25 read 0.01-0.02 s that way.
    """
    probe = _read(directory / "times.probe")
    if probe:
        return times_total_s(probe)
    mid0, mid1 = _read(directory / "times.mid0"), _read(directory / "times.mid1")
    if mid0 and mid1:
        return times_children_s(mid1) - times_children_s(mid0)
    return 0.0


def stat_cpu_s(before: str, after: str, clk_tck: int) -> float:
    """utime+stime growth of a /proc/PID/stat pair, in seconds."""
    def ticks(stat: str) -> int:
        fields = stat[stat.rfind(")") + 2:].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return (ticks(after) - ticks(before)) / clk_tck


def _spin_threads(text: str) -> dict[int, tuple[str, int]]:
    """tid -> (state, ran + waited ns) of agent.sh's spin.threads listing ("tid state run_ns wait_ns")."""
    threads = {}
    for fields in (line.split() for line in text.splitlines()):
        if len(fields) == 4:
            threads[int(fields[0])] = (fields[1], int(fields[2]) + int(fields[3]))
    return threads


def spinners_runnable_s(before: str, after: str, wall_s: float) -> float:
    """How long the spinners' threads were runnable in the window, summed over threads: the whole
    window for a thread runnable (state R) at both ends (a spinner never blocks), else its growth
    of ran + waited time by schedstat. Not schedstat alone: it adds a wait only when the thread next
    runs, so a thread starved for the whole window shows none (seen: 3 of 4 spinners of a Redis
    profile cell unchanged over 8.7 s)."""
    first, last = _spin_threads(before), _spin_threads(after)
    total = 0.0
    for tid, (state, ns) in last.items():
        was = first.get(tid)
        if was is None:
            continue
        total += wall_s if state == was[0] == "R" else (ns - was[1]) / 1e9
    return total


def procstat_busy_s(before: str, after: str, clk_tck: int) -> float:
    """Non-idle time over all CPUs between two copies of /proc/stat's aggregate `cpu` line."""
    def busy(text: str) -> int:
        fields = [int(v) for v in text.splitlines()[0].split()[1:]]
        return sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait (guest time is in user)
    return (busy(after) - busy(before)) / clk_tck


def read_cell(directory: Path, *, source: str) -> CellRaw:
    """The raw files of cells/<idx> (written by guest/agent.sh)."""
    idx, arm, level, repeat = (_read(directory / "cell") or "").split()
    raw = CellRaw(int(idx), arm, int(level), int(repeat), done=(directory / "done").is_file())
    wall = _read(directory / "wall")
    if wall:
        start, end = (float(v) for v in wall.split())
        raw.wall_s = end - start
        raw.window = (start, end)
    before, after = _read(directory / "spin.stat.before"), _read(directory / "spin.stat.after")
    clk = int(_read(directory / "clk_tck") or 100)
    if before and after:
        raw.spinner_cpu_s = stat_cpu_s(before, after, clk)
    elif raw.level == 0:
        raw.spinner_cpu_s = 0.0
    threads = _read(directory / "spin.threads.before"), _read(directory / "spin.threads.after")
    if threads[0] and threads[1] and raw.wall_s:
        raw.spinner_runnable_s = spinners_runnable_s(threads[0], threads[1], raw.wall_s)
    for name, attr in (("scx", "scx_cpu_s"), ("service", "service_cpu_s")):
        pair = _read(directory / f"{name}.stat.before"), _read(directory / f"{name}.stat.after")
        if pair[0] and pair[1]:
            setattr(raw, attr, stat_cpu_s(pair[0], pair[1], clk))
    busy = _read(directory / "procstat.before"), _read(directory / "procstat.after")
    if busy[0] and busy[1]:
        raw.busy_cpu_s = procstat_busy_s(busy[0], busy[1], clk)
    before_s, after_s = _read(directory / "times.before"), _read(directory / "times.after")
    if source == "command" and before_s and after_s:
        generator = times_children_s(after_s) - times_children_s(before_s)
        raw.generator_cpu_s = max(generator - _probe_cpu_s(directory), 0.0)
    raw.state_before = _read(directory / "state.before")
    raw.state_after = _read(directory / "state.after")
    raw.alive_before = _read(directory / "service.alive.before")
    raw.alive_after = _read(directory / "service.alive.after")
    rc = _read(directory / "load.rc")
    raw.load_rc = int(rc) if rc not in (None, "") else None
    return raw


def _attached(state: str | None) -> bool:
    return bool(state) and state.split()[0] == "enabled" and "layered" in state


def spinner_floor_s(level: int, vcpus: int, wall_s: float, duty: float = 1.0) -> float:
    """The least CPU time `level` spinners (busy `duty` of the time) must burn in `wall_s` on `vcpus`."""
    return SPINNER_MIN_CPUS_SHARE * duty * min(level, max(vcpus - 1, 1)) * wall_s


def reasons(raw: CellRaw, *, baseline: bool, vcpus: int, window_s: float,
            metrics_error: str | None, duty: float = 1.0, load_is_target: bool = False) -> list[str]:
    """Why the cell is invalid (empty: valid). `load_is_target`: the workload has no service, its
    load command is what is measured, so a busy load command is the workload working, not a
    saturated generator (the `generator` rule does not apply)."""
    found: list[str] = []
    if not raw.done:
        return ["cut: the cell never finished (the run stopped during it)"]
    wall = raw.wall_s or window_s
    if raw.level > 0:
        want = (spinner_floor_s(raw.level, vcpus, wall, duty) if baseline
                else SPINNER_ALIVE_CPUS * wall)
        got = raw.spinner_cpu_s
        starved = (not baseline and raw.spinner_runnable_s is not None
                   and raw.spinner_runnable_s >= SPINNER_RUNNABLE_SHARE * raw.level * wall)
        if (got is None or got < want) and not starved:
            shown = "no reading" if got is None else f"{got:.2f} s"
            rule = "" if baseline else ": the background never ran"
            found.append(f"spinners: {raw.level} spinners burned {shown} of CPU in {wall:.1f} s "
                         f"(need >= {want:.2f} s{rule})")
    if (not load_is_target and raw.generator_cpu_s is not None
            and raw.generator_cpu_s >= GENERATOR_MAX_SHARE * wall):
        found.append(f"generator: the load generator used {raw.generator_cpu_s:.2f} s of CPU in "
                     f"{wall:.1f} s (saturated: it, not the service, was the bottleneck)")
    if "0" in (raw.alive_before, raw.alive_after):
        found.append("service: the service was not alive for the whole cell")
    if baseline:
        if _attached(raw.state_before) or _attached(raw.state_after):
            found.append(f"attach: a sched_ext scheduler was attached in a baseline cell "
                         f"({raw.state_before} / {raw.state_after})")
    else:
        if not (_attached(raw.state_before) and _attached(raw.state_after)):
            found.append(f"attach: scx_layered was not attached for the whole cell "
                         f"(start {raw.state_before}, end {raw.state_after})")
        if raw.membership_error:
            found.append(f"membership: {raw.membership_error}")
        elif raw.mismatched:
            found.append(f"membership: {len(raw.mismatched)} of {raw.members} target threads outside "
                         f"their group's layer: " + ", ".join(raw.mismatched[:4]))
    if raw.load_rc == 143:  # SIGTERM from the agent's watchdog (LOAD_TIMEOUT)
        found.append("load: the load generator did not finish within the agent's load timeout "
                     "(stopped, status 143)")
    elif raw.load_rc not in (0, None):
        found.append(f"load: the load generator exited with status {raw.load_rc}")
    if metrics_error:
        found.append(f"load: {metrics_error}")
    return found
