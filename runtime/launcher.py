"""apply / status / stop: the runtime's public operations.

Problem: applying a profile touches the whole machine's scheduling, so every
path must end in a known state: attached as asked, or nothing attached and a
reason; and threadwise must never signal a process it did not start.

Approach: refuse early (no sched_ext: name the lab command; not root; a
scheduler already attached, ours or not), resolve the input to a layer config
(`config.py`, validated by scx_layered's parser), then hand it to a
supervisor (`supervisor.py`): a detached `python -m` process by default, so
`apply` returns as soon as sysfs shows layered attached, or in-process with
`--foreground`. `status` reads the supervisor's state file, the sysfs state
and scx_layered's stats socket. `stop` signals only the supervisor recorded
in the state file, and only if its pid still has the recorded start time;
the supervisor stops scx_layered and confirms `disabled`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from threadwise.errors import PermissionProblem, SchedulerFailure, StatsUnavailable, UsageError
from threadwise.runtime import config as config_mod
from threadwise.runtime import scx
from threadwise.runtime.stats import read_layers
from threadwise.runtime.supervisor import (
    DISABLE_WAIT_S,
    MARKER,
    STOP_GRACE_S,
    RunFiles,
    Supervisor,
    is_alive_and_ours,
    read_state,
    write_state,
)

ACTIVE_PHASES = ("starting", "attached", "stopping")


def _failure(state: dict, files: RunFiles, *, attached_before: bool) -> SchedulerFailure:
    report = state.get("exit") or {}
    after = state.get("state_after", "?")
    what = "ended" if attached_before else "did not attach"
    kernel = state.get("kernel_log") or []
    message = f"scx_layered {what}: {report.get('kind', '?')}: {report.get('message', '?')}"
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
    if (
        state
        and state.get("phase") in ACTIVE_PHASES
        and is_alive_and_ours(state.get("supervisor_pid"), state.get("supervisor_start"))
    ):
        raise UsageError(
            f"{state.get('source')} is already applied (supervisor pid {state['supervisor_pid']})",
            hint="threadwise stop first",
        )
    if snap.state != "disabled":
        raise UsageError(
            f"another sched_ext scheduler is attached ({snap.ops or '?'}, state {snap.state})",
            hint="threadwise only stops schedulers it started; stop that one where it was started",
        )


def prepare(path: Path, shape: str, files: RunFiles) -> config_mod.ResolvedConfig:
    """Refuse or resolve: the config ends up in files.config, checked by scx_layered."""
    _preflight(files)
    resolved = config_mod.resolve(path, shape)
    files.root.mkdir(parents=True, exist_ok=True)
    config_mod.write_config(resolved, files.config)
    config_mod.parse_check(scx.scx_layered_path(), files.config)
    return resolved


def apply_background(
    resolved: config_mod.ResolvedConfig,
    files: RunFiles,
    *,
    attach_timeout_s: float,
    duration_s: float | None = None,
) -> dict:
    """Start a detached supervisor; return its state once attached, or raise."""
    files.state.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", MARKER, "--run-dir", str(files.root),
        "--source", resolved.source, "--attach-timeout", str(attach_timeout_s),
    ]  # fmt: skip
    if duration_s:
        argv += ["--duration", str(duration_s)]
    with files.supervisor_log.open("wb") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + attach_timeout_s + STOP_GRACE_S + DISABLE_WAIT_S
    while time.monotonic() < deadline:
        state = read_state(files) or {}
        phase = state.get("phase")
        if phase == "attached":
            return state
        if phase in ("failed", "stopped"):
            raise _failure(state, files, attached_before=False)
        if process.poll() is not None and phase is None:
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
) -> dict:
    """Supervise in this process until Ctrl-C / SIGTERM / --duration; raise on failure."""
    files.state.unlink(missing_ok=True)
    supervisor = Supervisor(
        files.config,
        files,
        source=resolved.source,
        attach_timeout_s=attach_timeout_s,
        duration_s=duration_s,
        log=log,
    )
    supervisor.run()
    state = supervisor.state
    if state.get("phase") != "stopped":
        raise _failure(state, files, attached_before="attached_at" in state)
    return state


def status(files: RunFiles, *, interval_s: float = 1.0) -> dict:
    """What is applied, the sysfs state, per-layer figures; `problem` when something is wrong."""
    snap = scx.sched_ext_state()
    result: dict = {
        "sched_ext": {"supported": snap.supported, "state": snap.state, "ops": snap.ops},
        "applied": read_state(files),
        "layers": None,
        "problem": None,
    }
    state = result["applied"]
    if not state:
        return result
    alive = is_alive_and_ours(state.get("supervisor_pid"), state.get("supervisor_start"))
    state["supervisor_alive"] = alive
    phase = state.get("phase")
    if phase == "failed":
        report = state.get("exit") or {}
        result["problem"] = f"{report.get('kind')}: {report.get('message')}"
    elif phase in ACTIVE_PHASES and not alive:
        result["problem"] = "the supervisor is gone without recording an end (killed?)"
    elif phase == "attached" and not snap.layered_attached:
        result["problem"] = f"sysfs says state {snap.state!r}, ops {snap.ops!r}: not attached"
    elif phase == "attached":
        try:
            result["layers"] = [f.to_json() for f in read_layers(interval_s=interval_s)]
        except StatsUnavailable as error:
            result["problem"] = error.message
    return result


def _wait_gone(pid: int, start: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive_and_ours(pid, start):
            return True
        time.sleep(0.1)
    return False


def stop(files: RunFiles) -> dict:
    """Stop the applied profile and confirm sysfs reads `disabled`; returns the final state."""
    state = read_state(files)
    snap = scx.sched_ext_state()
    if not state or state.get("phase") not in ACTIVE_PHASES:
        if snap.state not in ("", "disabled"):
            raise UsageError(
                f"a sched_ext scheduler is attached ({snap.ops}) but threadwise did not start it",
                hint="threadwise only stops schedulers it started",
            )
        return {"stopped": False, "last": state, "state_after": snap.state}
    pid, start = state.get("supervisor_pid"), state.get("supervisor_start")
    supervised = is_alive_and_ours(pid, start)
    if supervised:
        os.kill(int(pid), signal.SIGTERM)
        _wait_gone(int(pid), int(start), STOP_GRACE_S + DISABLE_WAIT_S + 10)
    elif is_alive_and_ours(state.get("scx_pid"), state.get("scx_start")):
        # The supervisor vanished (SIGKILL) and PDEATHSIG did not end our scx_layered.
        os.kill(int(state["scx_pid"]), signal.SIGINT)
        _wait_gone(int(state["scx_pid"]), int(state["scx_start"]), STOP_GRACE_S)
    after = scx.wait_for_state("disabled", DISABLE_WAIT_S)
    final = read_state(files) or state
    if not supervised and final.get("phase") in ACTIVE_PHASES:
        # Nobody recorded the end: say what we know instead of leaving "attached".
        message = "the supervisor was gone; scx_layered ended without a report"
        final.update(
            phase="failed",
            exit={"kind": "supervisor_lost", "message": message, "returncode": None, "attached": True},
            state_after=after.state,
        )
        write_state(files, final)
    if after.state != "disabled":
        raise SchedulerFailure(
            f"sched_ext still reads {after.state!r} ({after.ops}) after stop",
            hint=f"see {files.log}; `echo S > /proc/sysrq-trigger` disables sched_ext",
        )
    return {"stopped": True, "last": final, "state_after": after.state}
