"""apply / status / stop: the runtime's public operations.

Problem: applying a profile touches the whole machine's scheduling, so every
path must end in a known state: attached as asked, or nothing attached and a
reason; and threadwise must never signal a process it did not start.

Approach: refuse early (no sched_ext: name the lab command; not root; a
scheduler already attached, ours or not), read and validate the input once and
resolve that typed input to a layer config (`config.py`, checked by scx_layered's
parser, once), then hand it to a
supervisor (`supervisor.py`): a detached `python -m` process by default, so
`apply` returns as soon as sysfs shows layered attached, or in-process with
`--foreground`. `status` reads the supervisor's state file (a `RunState`,
state.py), the sysfs state and scx_layered's stats socket. `stop` signals only the supervisor recorded
in the state file, and only if its pid still has the recorded start time;
the supervisor stops scx_layered and confirms `disabled`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from threadwise.errors import (
    PermissionProblem,
    SchedulerFailure,
    StatsUnavailable,
    ThreadwiseError,
    UsageError,
)
from threadwise.runtime import config as config_mod
from threadwise.runtime import holder, scx
from threadwise.runtime.exitinfo import ExitKind, ExitReport
from threadwise.runtime.state import Phase, RunFiles, RunState, read_state, write_state
from threadwise.runtime.stats import LayerFigures, read_layers
from threadwise.runtime.supervisor import (
    DISABLE_WAIT_S,
    MARKER,
    STOP_GRACE_S,
    Supervisor,
    is_alive_and_ours,
)

if TYPE_CHECKING:
    from threadwise.shape import Shape
    from threadwise.synthesize.api import LayerConfig

__all__ = ["SchedulerFailure", "StatusReport", "StopReport", "apply_background", "apply_foreground",
           "prepare", "status", "stop"]


@dataclass
class StatusReport:
    """What `status` found: sysfs, the recorded run, per-layer figures, and any problem."""

    sched_ext: scx.SchedExtState
    applied: RunState | None
    supervisor_alive: bool | None = None
    layers: list[LayerFigures] | None = None
    problem: str | None = None
    membership: dict[str, Any] | None = None  # target threads and their layers (membership.py)

    def to_json(self) -> dict[str, Any]:
        applied = None
        if self.applied is not None:
            applied = {**self.applied.to_json(), "supervisor_alive": self.supervisor_alive}
        return {
            "sched_ext": {"supported": self.sched_ext.supported, "state": self.sched_ext.state,
                          "ops": self.sched_ext.ops},
            "applied": applied,
            "layers": None if self.layers is None else [f.to_json() for f in self.layers],
            "problem": self.problem,
            "membership": self.membership,
        }


@dataclass
class StopReport:
    """What `stop` did: whether it stopped a run, that run's final state, sysfs afterwards."""

    stopped: bool
    last: RunState | None
    state_after: str

    def to_json(self) -> dict[str, Any]:
        return {"stopped": self.stopped, "last": None if self.last is None else self.last.to_json(),
                "state_after": self.state_after}


def _failure(state: RunState, files: RunFiles, *, attached_before: bool) -> SchedulerFailure:
    report = state.exit
    after = state.state_after or "?"
    what = "ended" if attached_before else "did not attach"
    kernel = state.kernel_log or []
    message = (f"scx_layered {what}: {report.kind if report else '?'}: "
               f"{report.message if report else '?'}")
    if kernel:
        message += "\n  kernel: " + "\n  kernel: ".join(kernel[-3:])
    nothing = "nothing is attached" if after == "disabled" else "WARNING: still attached"
    return SchedulerFailure(
        message, hint=f"{nothing} (sched_ext state: {after}); scx_layered output: {files.log}"
    )


def _preflight(files: RunFiles) -> None:
    snap = scx.require_sched_ext()
    if os.geteuid() != 0:
        raise PermissionProblem("attaching a sched_ext scheduler needs root", hint="run as root")
    state = read_state(files)
    if state and state.phase.active and is_alive_and_ours(state.supervisor_pid, state.supervisor_start):
        raise UsageError(
            f"{state.source} is already applied (supervisor pid {state.supervisor_pid})",
            hint="threadwise stop first",
        )
    if snap.state != "disabled":
        raise UsageError(
            f"another sched_ext scheduler is attached ({snap.ops or '?'}, state {snap.state})",
            hint="threadwise only stops schedulers it started; stop that one where it was started",
        )


def prepare(path: Path, shape: Shape | None, files: RunFiles,
            scx_args: tuple[str, ...] = (), hint_plan: Path | None = None) -> config_mod.ResolvedConfig:
    """Refuse or resolve: the input is read and validated once, the config (a profile compiled for
    `shape`, None: this machine's; checked once by scx_layered's parser, with `scx_args` and the
    title hints of `hint_plan` for a .json config) ends up in files.config, its hints in files.hints."""
    loaded = config_mod.load_input(path)   # bad input first: it is the user's to fix wherever this runs
    config_mod.check_scx_args(loaded, scx_args)
    plan = config_mod.load_hint_plan(loaded, hint_plan)
    _preflight(files)
    resolved = config_mod.resolve_input(loaded, shape, scx_args)
    if plan is not None:
        resolved = dataclasses.replace(resolved, hint_plan=plan)
    files.root.mkdir(parents=True, exist_ok=True)
    config_mod.write_config(resolved, files.config)
    if resolved.hint_plan is not None:
        resolved.hint_plan.save(files.hints)
    else:
        files.hints.unlink(missing_ok=True)
    files.run_counts.unlink(missing_ok=True)  # an earlier apply's: this one re-matches anew, or not
    return resolved


def apply_background(
    resolved: config_mod.ResolvedConfig,
    files: RunFiles,
    *,
    attach_timeout_s: float,
    duration_s: float | None = None,
    held_by: int | None = None,
) -> RunState:
    """Start a detached supervisor; return its state once attached, or raise. `held_by`: the pid
    of a process that holds the profile on trial (holder.py): if it dies first, the supervisor
    stops scx_layered."""
    files.state.unlink(missing_ok=True)
    if held_by is None:
        holder.release(files)
    else:
        holder.hold(files, held_by)
    argv = [
        sys.executable, "-m", MARKER, "--run-dir", str(files.root),
        "--source", resolved.source, "--attach-timeout", str(attach_timeout_s),
    ]  # fmt: skip
    if duration_s:
        argv += ["--duration", str(duration_s)]
    argv += [f"--scx-arg={arg}" for arg in resolved.scx_args]
    with files.supervisor_log.open("wb") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + attach_timeout_s + STOP_GRACE_S + DISABLE_WAIT_S
    while time.monotonic() < deadline:
        state = read_state(files)
        if state is not None and state.phase is Phase.ATTACHED:
            return state
        if state is not None and state.phase.ended:
            raise _failure(state, files, attached_before=False)
        if process.poll() is not None and state is None:
            tail = files.supervisor_log.read_text(errors="replace").strip().splitlines()[-5:]
            raise SchedulerFailure(
                f"the supervisor exited with status {process.returncode} before starting: "
                + " | ".join(tail),
                hint=f"log: {files.supervisor_log}",
            )
        time.sleep(0.1)
    raise SchedulerFailure(f"no answer from the supervisor (pid {process.pid})")


def apply_foreground(
    resolved: config_mod.ResolvedConfig,
    files: RunFiles,
    *,
    attach_timeout_s: float,
    duration_s: float | None,
    log: Callable[[str], None],
) -> RunState:
    """Supervise in this process until Ctrl-C / SIGTERM / --duration; raise on failure."""
    files.state.unlink(missing_ok=True)
    holder.release(files)   # this process is the supervisor: nobody else holds the run
    supervisor = Supervisor(
        files.config,
        files,
        source=resolved.source,
        attach_timeout_s=attach_timeout_s,
        duration_s=duration_s,
        scx_args=resolved.scx_args,   # as apply_background passes them to its supervisor
        log=log,
    )
    supervisor.run()
    state = supervisor.state
    if state.phase is not Phase.STOPPED:
        raise _failure(state, files, attached_before=state.attached_at is not None)
    return state


def status(files: RunFiles, *, interval_s: float = 1.0) -> StatusReport:
    """What is applied, the sysfs state, per-layer figures; `problem` when something is wrong."""
    snap = scx.sched_ext_state()
    result = StatusReport(sched_ext=snap, applied=read_state(files))
    state = result.applied
    if state is None:
        return result
    alive = is_alive_and_ours(state.supervisor_pid, state.supervisor_start)
    result.supervisor_alive = alive
    if state.phase is Phase.FAILED:
        report = state.exit
        result.problem = f"{report.kind if report else None}: {report.message if report else None}"
    elif state.phase.active and not alive:
        result.problem = "the supervisor is gone without recording an end (killed?)"
    elif state.phase is Phase.ATTACHED and not snap.layered_attached:
        result.problem = f"sysfs says state {snap.state!r}, ops {snap.ops!r}: not attached"
    elif state.phase is Phase.ATTACHED:
        try:
            result.layers = read_layers(interval_s=interval_s)
        except StatsUnavailable as error:
            result.problem = error.message
        result.membership = _membership(files)
    return result


def _membership(files: RunFiles) -> dict:
    """Each target thread's layer against its group's (see membership.py), or why it is unknown."""
    # deferred: membership and synthesize's typed config, which `threadwise --help` (importing this
    # module) does without
    from threadwise.runtime import membership
    from threadwise.synthesize.api import LayerConfig

    try:
        since = None
        if files.run_counts.is_file():  # written by the last re-match: who has run since
            since = {int(tid): count for tid, count in json.loads(files.run_counts.read_text()).items()}
        config = LayerConfig.load(files.config)   # the applied copy
        if files.hints.is_file():   # title groups: each process's hint is part of where it belongs
            hinted, process = _title_hints(files)
            rows = membership.membership(config, since=since, hints=hinted, process=process)
        else:
            rows = membership.membership(config, since=since)
    except (OSError, ValueError, ThreadwiseError) as error:
        return {"threads": [], "error": getattr(error, "message", str(error))}
    return {"threads": [row.to_json() for row in rows], "error": None}


def _title_hints(files: RunFiles) -> tuple[dict[int, int], str]:
    """pid -> the hint each workload process's title earns now, and the workload's comm prefix."""
    # deferred: membership and the title rule, which `threadwise --help` (importing this module) does without
    from threadwise.runtime import hints, membership

    plan = hints.HintPlan.load(files.hints)
    pids = membership.pids_with_comm_prefix([plan.process])
    state = read_state(files)
    if state is None or state.hint_map is None or not Path(state.hint_map).exists():
        return hints.expected_hints(plan, pids), plan.process
    with hints.HintMap(Path(state.hint_map)) as hint_map:
        return hints.expected_hints(plan, pids, hint_map), plan.process


def rematch_targets(config: LayerConfig, files: RunFiles | None = None) -> list[int]:
    """Have scx_layered match the config's target threads again (membership.rematch); their run
    counts then go to `files.run_counts`, so `status` tells a thread still parked from a fault."""
    # deferred: membership, which `threadwise --help` (importing this module) does without
    from threadwise.runtime import membership

    pids = membership.pids_with_comm_prefix(membership.target_prefixes(config))
    counts: dict[int, int] = {}
    for pid in pids:
        try:
            counts.update(membership.rematch(pid))
        except ProcessLookupError:
            continue
    if files is not None:
        files.run_counts.write_text(json.dumps(counts))
    return pids


def _wait_gone(pid: int, start: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive_and_ours(pid, start):
            return True
        time.sleep(0.1)
    return False


def stop(files: RunFiles) -> StopReport:
    """Stop the applied profile and confirm sysfs reads `disabled`; returns the final state."""
    state = read_state(files)
    snap = scx.sched_ext_state()
    if state is None or not state.phase.active:
        if snap.state not in ("", "disabled"):
            raise UsageError(
                f"a sched_ext scheduler is attached ({snap.ops}) but threadwise did not start it",
                hint="threadwise only stops schedulers it started",
            )
        return StopReport(stopped=False, last=state, state_after=snap.state)
    pid, start = state.supervisor_pid, state.supervisor_start
    supervised = pid is not None and start is not None and is_alive_and_ours(pid, start)
    scx_pid, scx_start = state.scx_pid, state.scx_start
    if supervised and pid is not None and start is not None:
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid, start, STOP_GRACE_S + DISABLE_WAIT_S + 10)
    elif scx_pid is not None and scx_start is not None and is_alive_and_ours(scx_pid, scx_start):
        # The supervisor vanished (SIGKILL) and PDEATHSIG did not end our scx_layered.
        os.kill(scx_pid, signal.SIGINT)
        _wait_gone(scx_pid, scx_start, STOP_GRACE_S)
    after = scx.wait_for_state("disabled", DISABLE_WAIT_S)
    holder.release(files)
    final = read_state(files) or state
    if not supervised and final.phase.active:
        # Nobody recorded the end: say what we know instead of leaving "attached".
        final.phase = Phase.FAILED
        final.exit = ExitReport(ExitKind.SUPERVISOR_LOST,
                                "the supervisor was gone; scx_layered ended without a report", None, True)
        final.state_after = after.state
        write_state(files, final)
    if after.state != "disabled":
        raise SchedulerFailure(
            f"sched_ext still reads {after.state!r} ({after.ops}) after stop",
            hint=f"see {files.log}; `echo S > /proc/sysrq-trigger` disables sched_ext",
        )
    return StopReport(stopped=True, last=final, state_after=after.state)
