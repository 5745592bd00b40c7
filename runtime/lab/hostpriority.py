"""Host priority: the lab claims the host's CPU while it measures.

Problem: under multi-threaded TCG each guest vCPU is a host thread, so whatever else the host
runs takes time from the guest in bursts, and inside the guest that reads as the scheduler under
test doing badly. Beside a running test suite the lab's vCPUs went 20-48% unserved and identical
arms spread by +-70% (issue 32). The host's scheduler shares CPU between *autogroups* first
(`kernel.sched_autogroup_enabled = 1` on these hosts; every session is one group), so `renice` of
qemu's threads alone changes nothing against other sessions: measured, both of two lab VMs kept
~97% of one core whatever their threads' nice.

Approach: the lab starts qemu (or vng) in a session of its own (`start_new_session=True`), which
gives it an autogroup of its own. `HostClaim` writes nice -20 to that autogroup
(`/proc/PID/autogroup`, root only) and sets nice -20 on every thread of the session (each
`/proc/*/task/*` whose session is the leader's), again every `period_s` so threads started later
(the vCPUs, vng's qemu and virtiofsd) are caught. The thread nice is what counts where autogroups
are not in effect (the feature off, or the lab inside a non-root cpu cgroup, as under systemd);
the autogroup nice is what counts where they are. Measured, docs/lab.md "The lab on a busy host":
beside a `make test` run the unserved share fell from 20-35% to 3-4% (median). What was applied
is a sentence, recorded in the ladder file (`run.host_priority`). Two labs that both claim the
host compete as equals (same nice), as before.

Nothing here needs more than root: where the host refuses (not root, no autogroup file), the claim
says so once and the lab goes on measuring without it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

LAB_NICE = -20  # the strongest claim; a second lab claiming the same is an equal
AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
OFF = "off (--host-priority off: the lab shares the host's CPU like any other work)"


def _session_of(stat_text: str) -> int | None:
    """The session id (field 6) of a /proc/.../stat line; the comm may hold spaces and parens."""
    fields = stat_text[stat_text.rfind(")") + 2:].split()
    return int(fields[3]) if len(fields) > 3 else None


def session_threads(leader: int, proc: Path = Path("/proc")) -> list[int]:
    """Every thread id of every process in `leader`'s session (the lab's qemu, vng, virtiofsd)."""
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if _session_of((entry / "stat").read_text()) != leader:
                continue
            found.extend(int(task.name) for task in (entry / "task").iterdir() if task.name.isdigit())
        except (OSError, ValueError):
            continue  # the process ended while we looked
    return found


def cpu_cgroup(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The cpu controller's cgroup path of `pid` (v1 `N:cpu...:PATH`, else the v2 `0::PATH`)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
        if controllers == "":
            unified = path
    return unified


def autogroups_in_effect(pid: int, proc: Path = Path("/proc")) -> tuple[bool, str]:
    """Whether the host shares CPU between autogroups for `pid`, and why not when it does not.

    The kernel uses a task's autogroup only while the feature is on and the task sits in the root
    task group (kernel/sched/autogroup.h `task_wants_autogroup`)."""
    try:
        enabled = AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return False, "this kernel has no autogroups"
    if not enabled:
        return False, "autogroups are off (kernel.sched_autogroup_enabled = 0)"
    group = cpu_cgroup(pid, proc)
    if group not in (None, "/"):
        return False, f"the lab runs in the cpu cgroup {group}, where autogroups do not apply"
    return True, ""


@dataclass
class HostClaim:
    """Claims the host's CPU for one lab session (the process `leader` started with its own session).

    Use as a context around the VM's life; `applied` says what was done, in one sentence."""

    leader: int
    enabled: bool = True
    period_s: float = 0.5
    applied: str = ""
    refused: str | None = None  # why the host refused, once (None: it did not)
    _reniced: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HostClaim:
        if not self.enabled:
            self.applied = OFF
            return self
        autogroup = self._claim_autogroup()
        threads = self._renice_new()
        if self.refused is None:
            self.applied = f"{autogroup}; qemu's threads at nice {LAB_NICE}"
            self._thread = threading.Thread(target=self._follow, name="tw-host-claim", daemon=True)
            self._thread.start()
        elif threads == 0:
            self.applied = f"refused: {self.refused}"
        else:
            self.applied = f"{autogroup}; refused in part: {self.refused}"
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _claim_autogroup(self) -> str:
        """Set the session's autogroup nice. Written wherever the file exists (harmless where
        autogroups do not apply), reported as counting only where they do."""
        in_effect, why_not = autogroups_in_effect(self.leader)
        try:
            Path(f"/proc/{self.leader}/autogroup").write_text(f"{LAB_NICE}\n")
        except FileNotFoundError:
            return f"no autogroup claimed ({why_not or 'this kernel has no autogroups'})"
        except PermissionError:
            self.refused = "not allowed to set the autogroup's nice (needs root)"
            return "no autogroup claimed"
        except OSError as error:
            self.refused = f"the autogroup refused nice {LAB_NICE} ({error.strerror})"
            return "no autogroup claimed"
        if not in_effect:
            return f"qemu's autogroup at nice {LAB_NICE}, which does not count here ({why_not})"
        return f"qemu's autogroup at nice {LAB_NICE}"

    def _renice_new(self) -> int:
        """Set nice on the session's threads not yet done; how many were."""
        done = 0
        for tid in session_threads(self.leader):
            if tid in self._reniced:
                continue
            try:
                os.setpriority(os.PRIO_PROCESS, tid, LAB_NICE)
            except PermissionError:
                self.refused = self.refused or f"not allowed to set nice {LAB_NICE} (needs root)"
                return done
            except OSError:
                continue  # the thread ended
            self._reniced.add(tid)
            done += 1
        return done

    def _follow(self) -> None:
        while not self._stop.wait(self.period_s):
            with contextlib.suppress(OSError):
                self._renice_new()
