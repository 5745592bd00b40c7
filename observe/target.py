"""What to observe: a pid, a process name, a cgroup, or a command we launch.

The target is a set of processes (tgids) that can grow during the capture:
new processes with the name, new members of the cgroup, children of the pid
or command. Tracing itself is system-wide (who else held the CPUs matters);
the target decides which threads are marked `is_target` and get /proc
snapshots with the kernel's own runtime accounting.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from threadwise.durations import parse_duration
from threadwise.errors import TargetError, UsageError
from threadwise.observe import procfs
from threadwise.observe.backend import TaskActivity

__all__ = ["Target", "parse_duration"]   # parse_duration: threadwise.durations, re-exported


def _die_with_parent() -> None:
    """A launched workload ends with the observer, even on kill -9."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


@dataclass
class Target:
    kind: str                      # pid | comm | cgroup | command
    spec: str                      # what the user asked for, as text
    pid: int | None = None
    comm: str | None = None
    cgroup: str | None = None
    command: list[str] | None = None
    tgids: set[int] = field(default_factory=set)
    launched: subprocess.Popen[bytes] | None = None

    @classmethod
    def from_options(cls, *, pid: int | None, comm: str | None, cgroup: str | None,
                     command: list[str] | None) -> Target:
        chosen = [name for name, value in
                  (("--pid", pid), ("--comm", comm), ("--cgroup", cgroup), ("-- CMD", command))
                  if value]
        if len(chosen) != 1:
            raise UsageError(
                "choose exactly one target" + (f" (got {', '.join(chosen)})" if chosen else ""),
                hint="--pid PID, --comm NAME, --cgroup PATH, or -- CMD ARGS... to launch one",
            )
        if pid is not None:
            if pid <= 0 or not procfs.process_alive(pid):
                raise TargetError(f"no process with pid {pid}", hint="check it with: ps -p PID")
            return cls("pid", str(pid), pid=pid, tgids={pid, *procfs.descendants_of(pid)})
        if comm is not None:
            if len(comm) > 15:
                raise UsageError(f"process name {comm!r} is longer than 15 characters",
                                 hint=f"the kernel truncates comm to 15: use {comm[:15]!r}")
            found = procfs.pids_by_comm(comm)
            if not found and any(ch in comm for ch in "*?["):
                raise UsageError(f"--comm {comm!r}: globs are not supported; --comm takes one exact "
                                 "process name", hint="list names with: ps -eo comm | sort -u; or use "
                                 "--pid PID or --cgroup PATH")
            if not found:
                raise TargetError(f"no running process is named {comm!r}",
                                  hint="list names with: ps -eo comm | sort -u")
            return cls("comm", comm, comm=comm, tgids=set(found))
        if cgroup is not None:
            # the profile's CgroupPrefix needs the path as the kernel names it, not the directory
            cgroup = procfs.cgroup_path(cgroup)
            found = procfs.cgroup_pids(cgroup)
            if found is None:
                mount = procfs.cgroup2_mount()
                raise TargetError(
                    f"no cgroup {cgroup!r} in the cgroup v2 hierarchy"
                    + (f" ({mount})" if mount else " (no cgroup2 mount found)"),
                    hint="give a path as /proc/PID/cgroup shows it after '0::', "
                         "e.g. /system.slice/redis.service"
                         + (f", or its directory under {mount}" if mount else ""))
            return cls("cgroup", cgroup, cgroup=cgroup, tgids=set(found))
        assert command is not None
        if shutil.which(command[0]) is None:
            what = "no such file" if "/" in command[0] else "not found on PATH"
            raise UsageError(f"cannot run {command[0]!r}: {what}", hint="check the command after --")
        return cls("command", shlex.join(command), command=list(command))

    def launch(self) -> None:
        """Start the command (only after tracing is live, so its threads' births are seen)."""
        assert self.command is not None
        try:
            self.launched = subprocess.Popen(
                self.command, start_new_session=True, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl must run in the child
            )
        except (FileNotFoundError, PermissionError) as error:
            raise UsageError(f"cannot run {self.command[0]!r}: {error.strerror}",
                             hint="check the command after --") from error
        self.pid = self.launched.pid
        self.tgids = {self.launched.pid}

    def refresh(self) -> set[int]:
        """Grow the tgid set with processes that joined the target; return the new ones."""
        before = set(self.tgids)
        if self.kind == "comm" and self.comm:
            self.tgids.update(procfs.pids_by_comm(self.comm))
        elif self.kind == "cgroup" and self.cgroup:
            self.tgids.update(procfs.cgroup_pids(self.cgroup) or [])
        elif self.pid is not None:
            self.tgids.update(procfs.descendants_of(self.pid))
        return self.tgids - before

    def may_have_grown(self, activity: TaskActivity) -> bool:
        """Could `activity` (births and renames the tracer saw) have added threads or processes?

        A thread or child process of a target process is born with that process as its parent
        (a grandchild's parent joins first: its own birth triggers the scan that finds both);
        a process takes a name by fork or rename (exec renames). A cgroup also gains members that
        are moved in, which no task event shows: cgroup targets always say yes.
        """
        if self.kind == "cgroup":
            return True
        if activity.parent_tgids & self.tgids:
            return True
        return self.kind == "comm" and self.comm is not None and self.comm[:15] in activity.comms

    def alive(self) -> bool:
        if self.launched is not None:
            return self.launched.poll() is None
        if self.kind == "cgroup":
            return True   # a cgroup can be empty for a while; it ends with the duration
        return any(procfs.process_alive(pid) for pid in self.tgids)

    def stop_launched(self, grace_s: float = 3.0) -> None:
        """End the command we launched (and only it: its own process group)."""
        import os
        import signal

        if self.launched is None or self.launched.poll() is not None:
            return
        os.killpg(self.launched.pid, signal.SIGTERM)
        try:
            self.launched.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.launched.pid, signal.SIGKILL)
            self.launched.wait()
