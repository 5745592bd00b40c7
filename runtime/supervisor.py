"""The supervisor: the one process that owns a running scx_layered.

Problem: `apply` must return once the scheduler is attached, yet someone has
to notice when scx_layered dies or the kernel ejects it, report why, confirm
the kernel is back on its default scheduler, and make sure no scheduler stays
attached after threadwise lets go. And threadwise may only ever signal
processes it started.

Approach: a small supervisor (this module; `python -m
threadwise.runtime.supervisor`, or in-process for `apply --foreground`) starts
scx_layered as its child, with PR_SET_PDEATHSIG=SIGINT so that even a
SIGKILLed supervisor takes the scheduler down with it (SIGINT makes
scx_layered unregister cleanly; a dead scx_layered is detached by the kernel
anyway, as its struct_ops link closes). It records everything in
`<run dir>/state.json` (a `RunState`, state.py, written atomically): phase
`starting` -> `attached` (sysfs `state` = enabled and `root/ops` =
layered_*) -> `stopped` or `failed`, the pids with their start times (so `stop` can prove a pid is still
ours before signalling it), and the exit report (`exitinfo.py`) from
scx_layered's own output. SIGTERM/SIGINT/SIGHUP to the supervisor mean "stop":
SIGINT to scx_layered, wait, SIGKILL only if it hangs, then wait for sysfs to
read `disabled`. A run *held* by a canary (holder.py) also stops once its
holder has ended, so a profile nobody judged never outlives the judge. A profile
with title groups (the run's hints.json) gets a task-hint map pinned at a path
of this run's own, kept true while attached (hints.py) and unpinned at the end.
The exit status is 0 only for a requested, clean stop.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from threadwise.errors import ThreadwiseError
from threadwise.procs import is_alive_and_ours, proc_start_time
from threadwise.runtime import hints, newcomers, priority, scx
from threadwise.runtime.exitinfo import ExitKind, ExitReport, classify
from threadwise.runtime.holder import holder_gone
from threadwise.runtime.state import Phase, RunFiles, RunState, read_state, write_state
from threadwise.scx import PLAIN_OUTPUT_ENV, launch_argv

__all__ = ["RunFiles", "RunState", "Supervisor", "is_alive_and_ours", "proc_start_time", "read_state",
           "write_state"]

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 60.0  # TCG is slow: unregistering took seconds in the lab
DISABLE_WAIT_S = 30.0
MARKER = "threadwise.runtime.supervisor"


def _child_setup() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0)
    priority.load_at_high_priority()


def uptime_s() -> float:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def kernel_log_lines(since_uptime_s: float = 0.0, limit: int = 5) -> list[str]:
    """sched_ext lines of the kernel log since then (why the kernel disabled a scheduler)."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = []
    for line in done.stdout.splitlines():
        stamp = re.match(r"\[\s*(\d+\.\d+)\]", line)
        if "sched_ext" in line and (stamp is None or float(stamp.group(1)) >= since_uptime_s):
            lines.append(line.strip())
    return lines[-limit:]


class Supervisor:
    """Run scx_layered with `config` until asked to stop, it dies, or `duration_s` passes."""

    def __init__(
        self,
        config: Path,
        files: RunFiles,
        *,
        source: str,
        attach_timeout_s: float = 120.0,
        duration_s: float | None = None,
        scx_args: tuple[str, ...] = (),
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.config = config
        self.scx_args = scx_args
        self.files = files
        self.source = source
        self.attach_timeout_s = attach_timeout_s
        self.duration_s = duration_s
        self.log = log
        self.stop_requested = False
        self.state = RunState(Phase.STARTING, source=source, config=str(config))
        self._hint_map: hints.HintMap | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_requested = True
        self.state.stop_signal = signal.Signals(signum).name

    def _stop_wanted(self) -> bool:
        """A signal asked to stop, or the profile's holder ended undecided (holder.py)."""
        if not self.stop_requested:
            why = holder_gone(self.files)
            if why is not None:
                self.stop_requested, self.state.stop_reason = True, why
                self.log(f"{why}: stopping scx_layered")
        return self.stop_requested

    def _save(self) -> None:
        write_state(self.files, self.state)

    def run(self) -> ExitReport:
        signums = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in signums}
        try:
            return self._run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _run(self) -> ExitReport:
        binary = scx.scx_layered_path()
        self.state = RunState(
            Phase.STARTING, source=self.source, config=str(self.config), supervisor_pid=os.getpid(),
            supervisor_start=proc_start_time(os.getpid()), started_at=time.time(),
            started_uptime=uptime_s(), stop_signal=self.state.stop_signal,
        )
        env = dict(os.environ, **PLAIN_OUTPUT_ENV)
        pin = self._hint_map_pin()
        with self.files.log.open("wb") as out:
            child = subprocess.Popen(
                launch_argv(self.config, self.scx_args, binary),   # its flags are threadwise.scx's
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                # The supervisor runs no threads, so preexec_fn is safe here.
                preexec_fn=_child_setup,  # noqa: PLW1509
            )
        self.state.scx_pid, self.state.scx_start = child.pid, proc_start_time(child.pid)
        self.state.scx_binary = str(binary)
        self._save()
        try:
            attached = self._wait_attached(child)
            if attached:
                self._monitor(child)
        finally:
            if child.poll() is None:  # never leave a scheduler attached behind us
                self._stop_child(child)
            if self._hint_map is not None:
                self._hint_map.close()
            if pin is not None:
                hints.remove_pin(pin)
        return self._finish(child, attached)

    def _hint_map_pin(self) -> Path | None:
        """For a profile with title groups: the task-hint map's pin of this run's own, made ready,
        and scx_layered's --task-hint-map pointed at it (hints.py)."""
        if not self.files.hints.is_file() or hints.map_path_in(self.scx_args) is None:
            return None
        pin = hints.own_map_path(os.getpid())
        hints.prepare_pin(pin)
        self.scx_args = hints.with_map_path(self.scx_args, pin)
        self.state.hint_map = str(pin)
        return pin

    def _wait_attached(self, child: subprocess.Popen) -> bool:
        started = time.monotonic()
        while True:
            if child.poll() is not None:
                return False
            snap = scx.sched_ext_state()
            if snap.layered_attached:
                attach_s = time.monotonic() - started
                load_nice = priority.nice_of(child.pid)   # it loaded at nice -20 (priority.py)
                priority.run_at_normal(child.pid)
                self.state.phase, self.state.ops = Phase.ATTACHED, snap.ops
                self.state.attached_at, self.state.attach_s = time.time(), attach_s
                self._save()
                self.log(f"attached: {snap.ops} after {attach_s:.1f} s (loaded at nice {load_nice}, "
                         f"runs at {priority.nice_of(child.pid)})")
                return True
            if self._stop_wanted():
                return False
            if time.monotonic() - started > self.attach_timeout_s:
                self.state.attach_timeout = True
                return False
            time.sleep(0.1)

    def _monitor(self, child: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.duration_s if self.duration_s else None
        watcher, next_look = self._newcomers(), time.monotonic() + newcomers.POLL_S
        titles = self._title_hints()
        restore_until = time.monotonic() + priority.RESTORE_FOR_S
        while child.poll() is None:
            if time.monotonic() < restore_until:   # a thread born during the first pass
                priority.run_at_normal(child.pid)
            if titles is not None:
                titles = self._hint_titles(titles)
            if self._stop_wanted() or (deadline and time.monotonic() >= deadline):
                self.state.phase, self.state.stop_requested = Phase.STOPPING, True
                self._save()
                self._stop_child(child)
                return
            if watcher is not None and time.monotonic() >= next_look:
                try:
                    for pid, (uid, gid), why in watcher.poll():
                        self.log(f"re-matched pid {pid} (euid {uid}, egid {gid}; {why}): the profile "
                                 "selects by user, which scx_layered matches only at fork")
                except OSError as error:   # never let the watcher take the supervisor down
                    self.log(f"stopped watching for processes that change user: {error}")
                    watcher = None
                next_look = time.monotonic() + newcomers.POLL_S
            time.sleep(hints.POLL_S if titles is not None else 0.2)
        if not self.stop_requested:  # Ctrl-C in a terminal reaches scx_layered too
            self.log(f"scx_layered (pid {child.pid}) ended on its own, status {child.returncode}")

    def _title_hints(self) -> hints.TitleHints | None:
        """The title classifier writing the run's task-hint map (hints.py), or None: no title
        groups, or the map cannot be opened (logged: the profile stays, its title layers empty)."""
        if self.state.hint_map is None:
            return None
        try:
            plan = hints.HintPlan.load(self.files.hints)
            self._hint_map = hints.HintMap(Path(self.state.hint_map))
        except (OSError, ValueError, KeyError) as error:
            self.log(f"not hinting by process title: {error}")
            return None
        self.log(f"hinting {plan.process!r} processes by title into {self.state.hint_map} "
                 f"every {hints.POLL_S:g} s: " + ", ".join(f"{p!r} -> {plan.layers.get(h, '?')}"
                                                           for p, h in plan.patterns.items()))
        return hints.TitleHints(plan, self._hint_map.write)

    def _hint_titles(self, titles: hints.TitleHints) -> hints.TitleHints | None:
        """One poll of the title classifier: each placement and failure logged, never raised."""
        try:
            placed, failed = titles.poll()
        except OSError as error:   # never let the classifier take the supervisor down
            self.log(f"stopped hinting by process title: {error}")
            return None
        for placement in placed:
            self.log(placement.describe())
        for error in failed:
            self.log(f"hint not written: {error.message} ({error.hint})")
        if placed:
            self.state.hinted = len(titles.hinted)
            self._save()
        return titles

    def _newcomers(self) -> newcomers.Newcomers | None:
        """The watcher of processes that change user (runtime/newcomers.py), for a config that
        selects by user; None otherwise, or when the config does not load (scx_layered took it)."""
        from threadwise.synthesize.api import LayerConfig  # deferred: pydantic, once per run

        try:
            return newcomers.Newcomers.for_config(LayerConfig.load(self.config))
        except (OSError, ThreadwiseError) as error:
            self.log(f"not watching for processes that change user: {error}")
            return None

    def _stop_child(self, child: subprocess.Popen) -> None:
        child.send_signal(signal.SIGINT)  # scx_layered unregisters on SIGINT
        try:
            child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.log(f"scx_layered ignored SIGINT for {STOP_GRACE_S:.0f} s; sending SIGKILL")
            child.kill()
            child.wait()

    def _finish(self, child: subprocess.Popen, attached: bool) -> ExitReport:
        output = self.files.log.read_text(errors="replace")
        report = classify(output, child.returncode, attached=attached)
        if self.state.attach_timeout:
            report = ExitReport(
                ExitKind.ATTACH_TIMEOUT,
                f"not attached after {self.attach_timeout_s:.0f} s; stopped it",
                child.returncode,
                False,
            )
        after = scx.wait_for_state("disabled", DISABLE_WAIT_S)
        requested = self.stop_requested or bool(self.state.stop_requested)
        phase = Phase.STOPPED if requested and report.clean else Phase.FAILED
        self.state.phase, self.state.ended_at, self.state.exit = phase, time.time(), report
        self.state.state_after, self.state.ops_after = after.state, after.ops
        self.state.kernel_log = ([] if phase is Phase.STOPPED
                                 else kernel_log_lines(self.state.started_uptime or 0.0))
        self._save()
        self.log(f"{phase}: {report.describe()}; sched_ext state now {after.state!r}")
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MARKER}", description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--attach-timeout", type=float, default=120.0)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--scx-arg", action="append", default=[],
                        help="a scx_layered flag (repeatable; a profile's [scheduler] table)")
    args = parser.parse_args(argv)
    files = RunFiles(args.run_dir)
    priority.supervise_at_normal()   # whatever the nice of the command that applied the profile

    def log(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    supervisor = Supervisor(
        files.config,
        files,
        source=args.source,
        attach_timeout_s=args.attach_timeout,
        duration_s=args.duration,
        scx_args=tuple(args.scx_arg),
        log=log,
    )
    supervisor.run()
    return 0 if supervisor.state.phase is Phase.STOPPED else 1


if __name__ == "__main__":
    sys.exit(main())
