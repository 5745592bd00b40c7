"""Read threads, processes and the kernel's own CPU accounting from /proc.

Everything here tolerates the process or thread vanishing between listing and
reading (it returns None / skips), because targets exit while we look.
"""

from __future__ import annotations

import os
import time
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")

# /proc/<pid>/stat field 41 (policy) values, include/uapi/linux/sched.h.
POLICIES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE",
            6: "SCHED_DEADLINE", 7: "SCHED_EXT"}


@dataclass(frozen=True)
class ThreadSnapshot:
    """One thread as /proc shows it at `ts` (monotonic ns): a row of `proc_snapshot`.

    `phase` is when it was read (start | scan | end); `read_ns` how long the
    schedstat read took (schema migration 2). `euid`/`egid` are the process's effective user
    and group ids (schema migration 6; None: not read), what scx_layered's UIDEquals/GIDEquals
    compare: see `process_credentials`.
    """

    ts: int
    tid: int
    tgid: int
    comm: str
    process_comm: str
    cmdline: str
    cgroup: str
    nice: int
    policy: str
    rt_priority: int
    sum_exec_runtime: int
    run_delay: int
    timeslices: int
    read_ns: int = 0
    phase: str = "scan"
    euid: int | None = None
    egid: int | None = None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None


def process_alive(pid: int) -> bool:
    """Exists and is not a zombie (an exited child its parent has not reaped yet)."""
    stat = _read(PROC / str(pid) / "stat")
    if stat is None:
        return False
    fields = _stat_fields(stat)
    return bool(fields) and fields[0] not in ("Z", "X")


def process_comm(pid: int) -> str | None:
    text = _read(PROC / str(pid) / "comm")
    return None if text is None else text.rstrip("\n")


def thread_ids(tgid: int) -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(PROC / str(tgid) / "task"))
    except (FileNotFoundError, ProcessLookupError):
        return []


def all_pids() -> list[int]:
    return sorted(int(name) for name in os.listdir(PROC) if name.isdigit())


def pids_by_comm(comm: str) -> list[int]:
    """Processes whose comm equals `comm` (compared at the kernel's 15 characters)."""
    wanted = comm[:15]
    return [pid for pid in all_pids() if process_comm(pid) == wanted]


def cgroup_of(pid: int) -> str | None:
    text = _read(PROC / str(pid) / "cgroup")
    if text is None:
        return None
    for line in text.splitlines():
        # cgroup v2: "0::/path"; on hybrid hosts prefer the unified line.
        if line.startswith("0::"):
            return line[3:]
    return text.splitlines()[0].split(":", 2)[-1] if text else ""


def children_of(pid: int) -> list[int]:
    """Direct child processes (from every thread's children list)."""
    found: list[int] = []
    for tid in thread_ids(pid):
        text = _read(PROC / str(pid) / "task" / str(tid) / "children")
        if text:
            found.extend(int(x) for x in text.split())
    return found


def descendants_of(pid: int) -> list[int]:
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in children_of(stack.pop()):
            if child not in out:
                out.append(child)
                stack.append(child)
    return out


@dataclass(frozen=True)
class CpuSteal:
    """One CPU's steal time as /proc/stat shows it at `ts` (monotonic ns): a row of `cpu_steal`.

    Steal is time the hypervisor ran something else while this (virtual) CPU had work. With
    CONFIG_PARAVIRT_TIME_ACCOUNTING the kernel leaves it out of every task's runtime (schedstat),
    while the trace's clock runs on: measured here, a thread on the CPU is traced that much longer
    than schedstat says (checks.py). `/proc/stat` prints it in USER_HZ units (`steal_ns` is that
    count converted, so each read is up to one unit low). Schema migration 5.
    """

    ts: int
    phase: str
    cpu: int
    steal_ns: int


def read_cpu_steal(phase: str) -> list[CpuSteal]:
    """Every CPU's steal counter now (empty where /proc/stat has no steal column)."""
    ts = time.monotonic_ns()
    text = _read(PROC / "stat") or ""
    unit_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    rows = []
    for line in text.splitlines():
        name, *values = line.split()
        # per-CPU lines only ("cpu" alone is the sum); steal is the 8th value (proc(5))
        if name.startswith("cpu") and name[3:].isdigit() and len(values) >= 8:
            rows.append(CpuSteal(ts, phase, int(name[3:]), int(values[7]) * unit_ns))
    return rows


def _stat_fields(text: str) -> list[str]:
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return text[text.rfind(")") + 2 :].split()


def process_credentials(pid: int) -> tuple[int, int] | None:
    """(effective uid, effective gid) of a process, from the `Uid:` and `Gid:` lines of
    /proc/PID/status (real, effective, saved, filesystem: the second value); None when gone.

    Effective, because scx_layered 1.1.4 matches `UIDEquals`/`GIDEquals` against
    `p->real_cred->euid`/`egid` (main.bpf.c, MATCH_USER_ID_EQUALS): a server that starts as
    root and drops to a service user (nginx's workers, `user www-data;`) is told apart by
    them. Read once per process, for the leader: glibc's setuid/setgid change every thread
    of a process at once (the kernel keeps credentials per thread, but the C library
    broadcasts the change), so a thread with its own ids is not looked for.
    """
    text = _read(PROC / str(pid) / "status")
    if text is None:
        return None
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, values = line.partition(":")
        if key in ("Uid", "Gid"):
            ids = values.split()
            if len(ids) >= 2 and ids[1].isdigit():
                found[key] = int(ids[1])
    if len(found) != 2:
        return None
    return found["Uid"], found["Gid"]


def snapshot_thread(tgid: int, tid: int, *, process_name: str, cmdline: str,
                    cgroup: str, credentials: tuple[int, int] | None = None) -> ThreadSnapshot | None:
    base = PROC / str(tgid) / "task" / str(tid)
    # The kernel's runtime is read at some instant inside [ts, ts + read_ns]: keep
    # both, since the reader itself can be preempted mid-read on a busy machine.
    ts = time.monotonic_ns()
    schedstat = _read(base / "schedstat")
    read_ns = time.monotonic_ns() - ts
    stat = _read(base / "stat")
    comm = _read(base / "comm")
    if schedstat is None or stat is None or comm is None:
        return None
    runtime, delay, slices = (int(x) for x in schedstat.split()[:3])
    fields = _stat_fields(stat)
    # Fields after comm start at index 3 (state); nice = 19, rt_priority = 40, policy = 41.
    nice = int(fields[19 - 3])
    rt_priority = int(fields[40 - 3])
    policy = POLICIES.get(int(fields[41 - 3]), f"policy-{fields[41 - 3]}")
    euid, egid = credentials if credentials is not None else (None, None)
    return ThreadSnapshot(ts, tid, tgid, comm.rstrip("\n"), process_name, cmdline, cgroup,
                          nice, policy, rt_priority, runtime, delay, slices, read_ns,
                          euid=euid, egid=egid)


def snapshot_process(tgid: int, *, skip: Container[int] = frozenset()) -> list[ThreadSnapshot]:
    """Every thread of `tgid` but those in `skip` with its schedstat, read as close together as
    we can. The thread list comes first: a process with no thread left to read costs one listdir,
    not seven reads a thread (a scan for new threads of 160 processes mostly finds none)."""
    tids = [tid for tid in thread_ids(tgid) if tid not in skip]
    if not tids:
        return []
    name = process_comm(tgid)
    if name is None:
        return []
    raw_cmdline = _read(PROC / str(tgid) / "cmdline") or ""
    cmdline = raw_cmdline.replace("\0", " ").strip()
    cgroup = cgroup_of(tgid) or ""
    credentials = process_credentials(tgid)
    snaps = []
    for tid in tids:
        snap = snapshot_thread(tgid, tid, process_name=name, cmdline=cmdline, cgroup=cgroup,
                               credentials=credentials)
        if snap is not None:
            snaps.append(snap)
    return snaps


def cgroup2_mount() -> Path | None:
    """Where the unified (v2) hierarchy is mounted: /sys/fs/cgroup, or .../unified on hybrid hosts."""
    text = _read(PROC / "mounts") or ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def cgroup_path(given: str) -> str:
    """A cgroup as /proc/PID/cgroup shows it after '0::' (what scx_layered's CgroupPrefix
    matches), also when given as a directory under the cgroup2 mount (/sys/fs/cgroup/x)."""
    mount = cgroup2_mount()
    if mount is not None and given.startswith(f"{mount}/") and (Path(given)).is_dir():
        return "/" + given[len(str(mount)):].strip("/")
    return given


@dataclass(frozen=True)
class CpuLimit:
    """A cgroup's CPU bandwidth limit as the kernel enforces it (CFS quota per period).

    `quota_us` None means no limit ("max" in cgroup v2's cpu.max, -1 in v1's
    cpu.cfs_quota_us); `source` is the file it was read from.
    """

    quota_us: int | None
    period_us: int
    source: str


def _v1_cpu_mount() -> Path | None:
    """Where a cgroup v1 hierarchy with the cpu controller is mounted (hybrid hosts), if any."""
    for line in (_read(PROC / "mounts") or "").splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] == "cgroup" and "cpu" in fields[3].split(","):
            return Path(fields[1])
    return None


def _v1_cpu_cgroup(pid: int) -> str | None:
    for line in (_read(PROC / str(pid) / "cgroup") or "").splitlines():
        _hid, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return None


def cgroup_cpu_limit(cgroup: str, pids: list[int]) -> CpuLimit | None:
    """The CPU limit of a cgroup: its cpu.max (cgroup v2), else, on a hybrid host whose cpu
    controller sits in a v1 hierarchy, cpu.cfs_quota_us/cfs_period_us of the v1 cpu cgroup
    its processes `pids` share. None when neither can be read (no cpu controller there, or
    the processes sit in different v1 cpu cgroups: no one limit to name)."""
    mount = cgroup2_mount()
    if mount is not None:
        cpu_max = mount / cgroup.lstrip("/") / "cpu.max"
        text = _read(cpu_max)
        if text is not None:
            quota, _, period = text.strip().partition(" ")
            if period.isdigit() and (quota == "max" or quota.isdigit()):
                return CpuLimit(None if quota == "max" else int(quota), int(period), str(cpu_max))
    v1 = _v1_cpu_mount()
    paths = {path for path in map(_v1_cpu_cgroup, pids) if path is not None}
    if v1 is None or len(paths) != 1:
        return None
    directory = v1 / paths.pop().lstrip("/")
    quota_text, period_text = (_read(directory / name) for name in ("cpu.cfs_quota_us",
                                                                      "cpu.cfs_period_us"))
    try:
        quota, period = int((quota_text or "").strip()), int((period_text or "").strip())
    except ValueError:
        return None
    return CpuLimit(None if quota < 0 else quota, period, str(directory / "cpu.cfs_quota_us"))


def cgroup_pids(cgroup: str) -> list[int] | None:
    """Processes in a cgroup v2 directory and its descendants (None if no such cgroup)."""
    mount = cgroup2_mount()
    if mount is None:
        return None
    root = mount / cgroup.lstrip("/")
    if not root.is_dir():
        return None
    pids: set[int] = set()
    for directory, _dirs, files in os.walk(root):
        if "cgroup.procs" in files:
            text = _read(Path(directory) / "cgroup.procs") or ""
            pids.update(int(x) for x in text.split())
    return sorted(pids)


def task_identity(tid: int) -> tuple[int, str] | None:
    """(tgid, comm) of any task by tid, from /proc/<tid>/status (threads too)."""
    text = _read(PROC / str(tid) / "status")
    if text is None:
        return None
    fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    try:
        return int(fields["Tgid"].strip()), fields["Name"].rstrip("\n")
    except (KeyError, ValueError):
        return None
