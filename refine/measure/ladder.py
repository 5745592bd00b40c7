"""The background-load ladder: plan the cells, have the guest agent run them, bring the raw files back.

Problem: comparing schedulers on one workload needs every arm (the kernel's
default scheduler and each profile) measured at every background level,
repeated, back to back on the same machine, in an order that spreads slow
drift evenly over the arms; and where the host has no sched_ext it must all
happen inside one lab VM boot, with nothing but a POSIX shell in the guest
guaranteed.

Approach: `plan_cells` (plan.py) lays the cells out: per repeat, the arms take turns
(ABBA: the order reverses every repeat; or shuffled with a recorded seed), and
in its turn an arm runs every level once, ascending. A profile arm attaches
once per turn. `plan_script` renders the plan as `plan.sh`: the workload's
commands as shell functions (argv quoted, placeholders substituted here) and
one agent step per line. `execute` runs `guest/agent.sh` on it: in the lab VM
(one boot; the agent's log is streamed while it runs), or directly on a host
with sched_ext. Parsing, validity and statistics happen afterwards on the host
(`ingest.py`), from the raw files alone.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from threadwise.errors import MissingTool, TracerError, UsageError
from threadwise.observe.tracer_build import build as build_tracer
from threadwise.observe.tracer_build import layer_of_path

# The plan's types and layout live in plan.py (blockers.py reads them too); importable here as well.
from threadwise.refine.measure.plan import (  # noqa: F401
    AA_ARM,
    BASELINE,
    Arm,
    Cell,
    Plan,
    check_arm_name,
    make_plan,
    plan_cells,
)
from threadwise.runtime.hints import HintPlan, map_path_in, plan_from
from threadwise.runtime.lab.agent import Execution, agent_path
from threadwise.runtime.lab.initramfs import run_initramfs
from threadwise.runtime.lab.vng import run_in_lab
from threadwise.scx import step_interval_ms

if TYPE_CHECKING:
    from threadwise.refine.measure.workload import Workload

# After an attach, the agent re-matches the target and waits this long (s) for every target thread
# to appear in scx_layered's match map before the first cell (a TCG guest is slow).
SETTLE_TIMEOUT_S = 20
ATTACH_TIMEOUT_S = 240.0  # how long the agent waits for scx_layered to attach (TCG: 25-57 s measured)


def load_timeout_s(window_s: float) -> float:
    """How long the agent lets a load generator run before stopping it (its cell is then invalid)."""
    return max(120.0, window_s * 20)


def _function(name: str, argv: list[str], *, replace: bool = False) -> str:
    """A shell function running argv; `replace` execs it (always backgrounded: $! is the command)."""
    return f"{name}() {{ {'exec ' if replace else ''}{shlex.join(argv)}; }}"


TCP_PROBES = ("python", "nc")


def _ready_function(workload: Workload, tcp_probe: str = "python") -> str:
    # deferred: loads pydantic, which this module's other callers do without
    from threadwise.refine.measure.workload import render_argv

    service = workload.service
    assert service is not None
    ready = service.ready
    if ready.tcp_port is not None:
        if tcp_probe == "nc":
            # busybox nc: `-e true` closes the connection at once, so the status is only whether
            # the connect succeeded (0) or not (1); a plain nc would wait for the server to hang up.
            return _function("ready_cmd", ["busybox", "nc", "-w", "1", "127.0.0.1",
                                           str(ready.tcp_port), "-e", "true"])
        probe = ("import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)")
        return _function("ready_cmd", [sys.executable, "-c", probe, str(ready.tcp_port)])
    if ready.log_line is not None:
        line = shlex.quote(ready.log_line)
        return f'ready_cmd() {{ grep -qF -- {line} "$OUT/service.log" "$OUT/service.err"; }}'
    assert ready.command is not None
    return _function("ready_cmd", render_argv(list(ready.command), window_s=workload.objective.window_s))


def stall_bound(plan: Plan, attach_timeout_s: float = ATTACH_TIMEOUT_S) -> float:
    """The longest the agent may rightly stay silent running `plan` (runtime/lab/watchdog.py):
    its longest self-bounded step (an attach and the first step after it, a service's start or
    stop, a cell's warm-up, window and load timeout, a trace cell's start and send), plus 180 s
    for the boot before its first line and the probes between."""
    # deferred: blockers loads duckdb and pydantic, which this module's other callers do without
    from threadwise.refine.measure import blockers

    objective = plan.workload.objective
    window = objective.window_s
    steps = [attach_timeout_s + SETTLE_TIMEOUT_S + max((step_interval_ms(plan.arm(name).scx_args) / 1000
                                                        for name, _ in plan.turns
                                                        if not plan.arm(name).is_baseline), default=0),
             objective.warmup_s + window + load_timeout_s(window),
             blockers.TRACE_START_TIMEOUT_S + blockers.TRACE_SEND_TIMEOUT_S]
    if plan.workload.service is not None:
        service = plan.workload.service
        steps += [service.ready_timeout_s, service.stop_timeout_s]
        if service.prepare is not None:
            steps.append(service.prepare_timeout_s)
    return max(steps) + 180.0


def default_layer_reader() -> Path | None:
    """threadwise-layer-of, built with the libbpf tracer if it is not yet (observe/tracer_build);
    None on a machine that cannot build it (no compiler or libbpf)."""
    try:
        build_tracer(progress=lambda _message: None)
    except (MissingTool, TracerError):
        return None
    path = layer_of_path()
    return path if path.is_file() else None


def plan_script(plan: Plan, *, attach_mode: str, spin: Path, scx: Path | None,
                attach_timeout_s: float = ATTACH_TIMEOUT_S, spin_args: str = "", tcp_probe: str = "python",
                tracer: Path | str | None = "auto", layer_reader: Path | str | None = "auto") -> str:
    """plan.sh for guest/agent.sh: variables, the workload's commands, then one step a line.

    `tcp_probe`: how a `tcp_port` readiness check runs: "python" (this interpreter; the vng lab
    and the host have it) or "nc" (busybox nc, for the self-contained initramfs guest).
    `tracer`: the libbpf tracer for the extra, unmeasured trace cells (refine/measure/blockers.py);
    "auto": the built one when the agent attaches itself (`attach_mode="direct"`), None: none.
    `layer_reader`: threadwise-layer-of, which the membership probe reads placements with
    ("auto": built with the tracer; None: the probe reads the debug match map, which loses
    entries in a burst of matches)."""
    # deferred: loads duckdb, numpy, pyarrow and pydantic, which this module's other callers do without
    from threadwise.refine.measure import blockers

    if tcp_probe not in TCP_PROBES:
        raise UsageError(f"unknown tcp_probe {tcp_probe!r}", hint=f"one of {', '.join(TCP_PROBES)}")
    lines = _plan_variables(plan.workload, attach_mode=attach_mode, spin=spin, scx=scx,
                            attach_timeout_s=attach_timeout_s, spin_args=spin_args)
    if layer_reader == "auto":
        layer_reader = default_layer_reader()
    lines += ([f"LAYER_OF={shlex.quote(str(layer_reader))}"] if isinstance(layer_reader, Path) else
              ["# threadwise-layer-of is not built: the probe reads the debug match map (docs/lab.md)",
               "LAYER_OF=''"])
    if tracer == "auto":
        tracer = blockers.default_tracer(attach_mode)
    traced = blockers.trace_cells(plan) if isinstance(tracer, Path) else {}
    if traced:
        lines += [f"TRACER={shlex.quote(str(tracer))}", f"TRACE_RING_KB={blockers.TRACE_RING_KB}",
                  f"TRACE_START_TIMEOUT={blockers.TRACE_START_TIMEOUT_S}",
                  f"TRACE_SEND_TIMEOUT={blockers.TRACE_SEND_TIMEOUT_S}"]
    lines += _workload_functions(plan.workload, tcp_probe)
    lines += _steps(plan, traced)
    return "\n".join(lines) + "\n"


def _plan_variables(workload: Workload, *, attach_mode: str, spin: Path, scx: Path | None,
                    attach_timeout_s: float, spin_args: str) -> list[str]:
    """plan.sh's head: the variables every step of the agent reads."""
    objective = workload.objective
    window = objective.window_s
    q = shlex.quote
    return [
        "# plan.sh: generated by threadwise ladder; sourced by guest/agent.sh (POSIX sh).",
        f"TARGET={q(workload.target.process)}",
        f"WARMUP={objective.warmup_s:g}",
        f"WINDOW={window:g}",
        # the membership probe runs after the window while the target outlives it (a service), in
        # the window only when the load command is itself the target (agent.sh, docs/lab.md)
        f"PROBE_AT={'after' if workload.service is not None else 'mid'}",
        f"MEMBERSHIP_AT={min(1.0, window / 2):g}",
        # a load generator that hangs (redis-benchmark retries forever without a server) is
        # stopped after this long; its cell is then invalid (load exit status)
        f"LOAD_TIMEOUT={int(load_timeout_s(window))}",
        f"LOAD_SOURCE={q(workload.load.source)}",
        f"SPIN={q(str(spin))}",
        f"SPIN_ARGS={q(spin_args)}",
        f"ATTACH_MODE={q(attach_mode)}",
        f"ATTACH_TIMEOUT={int(attach_timeout_s)}",
        # after an attach, how long to wait for every target thread to appear in the match map
        f"SETTLE_TIMEOUT={SETTLE_TIMEOUT_S}",
        f"SCX={q(str(scx) if scx else '')}",
    ]


def _workload_functions(workload: Workload, tcp_probe: str) -> list[str]:
    """The workload's commands as shell functions: its service (start, ready check, prepare) and
    its load generator."""
    # deferred: loads pydantic, which this module's other callers do without
    from threadwise.refine.measure.workload import generator_argv, render_argv

    window = workload.objective.window_s
    lines: list[str] = []
    if workload.service is not None:
        lines += [f"READY_TIMEOUT={int(workload.service.ready_timeout_s)}",
                  f"STOP_TIMEOUT={int(workload.service.stop_timeout_s)}",
                  _function("service_cmd", render_argv(list(workload.service.command), window_s=window),
                            replace=True),
                  _ready_function(workload, tcp_probe)]
        if workload.service.prepare is not None:
            # run once by service_start when the service is ready (agent.sh), before any cell
            lines += [f"PREPARE_TIMEOUT={int(workload.service.prepare_timeout_s)}",
                      _function("prepare_cmd", render_argv(list(workload.service.prepare), window_s=window))]
    if workload.load.source == "command":
        lines.append(_function("load_cmd", generator_argv(workload.load, window_s=window,
                                                           is_target=workload.service is None),
                               replace=True))
    return lines


def _steps(plan: Plan, traced: Mapping[int, Sequence[Cell]]) -> list[str]:
    """One agent step a line: the service started once, then per turn of an arm its attach, its
    cells (and trace cells), its detach; the service stopped last."""
    q = shlex.quote
    lines = ["service_start"] if plan.workload.service is not None else []
    for turn, (arm_name, cells) in enumerate(plan.turns):
        arm = plan.arm(arm_name)
        if not arm.is_baseline:
            # the first userspace step sizes the layers: the agent waits for it (docs/lab.md)
            lines.append(f"attach {q(arm.name)} {round(step_interval_ms(arm.scx_args))}")
        lines += [f"cell {c.idx} {q(c.arm)} {c.level} {c.repeat}" for c in cells]
        lines += [f"trace_cell {c.idx} {q(c.arm)} {c.level} {c.repeat}" for c in traced.get(turn, ())]
        if not arm.is_baseline:
            lines.append(f"detach {q(arm.name)}")
    if plan.workload.service is not None:
        lines.append("service_stop")
    return lines


def write_plan(plan: Plan, out: Path, script: str) -> None:
    """The run directory as the agent expects it: plan.sh, arms/<arm>.json and, for a profile
    with a [scheduler] table, arms/<arm>.args (scx_layered flags, one per line); for a profile
    with title groups, arms/<arm>.hints.json (what `apply --hint-plan` has the runtime hint)."""
    (out / "arms").mkdir(parents=True, exist_ok=True)
    (out / "cells").mkdir(exist_ok=True)
    for arm in plan.arms:
        if arm.config is not None:
            (out / "arms" / f"{arm.name}.json").write_text(arm.config.to_json())
        if arm.scx_args:
            (out / "arms" / f"{arm.name}.args").write_text("".join(f"{arg}\n" for arg in arm.scx_args))
        hint_plan = arm_hint_plan(arm)
        if hint_plan is not None:
            hint_plan.save(out / "arms" / f"{arm.name}.hints.json")
    (out / "plan.sh").write_text(script)


def arm_hint_plan(arm: Arm) -> HintPlan | None:
    """What the runtime hints for `arm` (title groups), None for the baseline or a profile
    without title groups."""
    if arm.config is None or arm.profile_toml is None or map_path_in(arm.scx_args) is None:
        return None
    # deferred: the profile's reader loads pydantic, which a plan without title groups does without
    from threadwise.synthesize.api import parse_profile

    profile, _ = parse_profile(arm.profile_toml)
    return plan_from(profile, arm.config, f"arm {arm.name}")


class _Tail:
    """Print the agent's log as it grows (the lab's stdout arrives only at the end)."""

    def __init__(self, path: Path, emit: Callable[[str], None]) -> None:
        self.path, self.emit, self.offset = path, emit, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(1.0):
            self.flush()
        self.flush()

    def flush(self) -> None:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            self.emit(line)

    def __enter__(self) -> _Tail:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=5)


GUESTS = ("vng", "initramfs")


def execute(out: Path, *, lab: bool, cpus: int, timeout_s: float,
            progress: Callable[[str], None], guest: str = "vng", host_priority: bool = True,
            on_cell: Callable[[str], str | None] | None = None,
            stall_s: float | None = None) -> Execution:
    """Run the agent on `out` (plan.sh written), in the lab VM or on this host.

    `guest` (with `lab`): "vng" shares this host's root filesystem; "initramfs" boots a
    self-contained guest (runtime/lab/initramfs.py; plan.sh rendered with attach_mode="direct",
    tcp_probe="nc") that runs on any x86-64 machine with qemu; it is stopped when its agent says
    nothing for `stall_s` (stall_bound), or at `timeout_s` in all."""
    import subprocess

    if guest not in GUESTS:
        raise UsageError(f"unknown guest {guest!r}", hint=f"one of {', '.join(GUESTS)}")
    if lab and guest == "initramfs":
        # It streams the agent's lines from the console itself; agent.log arrives only at the end.
        return run_initramfs(out, cpus=cpus, timeout_s=timeout_s, progress=progress,
                             host_priority=host_priority, on_cell=on_cell, stall_s=stall_s)
    argv = ["sh", str(agent_path()), str(out.resolve())]  # the agent cd-s; a relative OUT would move
    started = time.monotonic()
    with _Tail(out / "agent.log", progress):
        if lab:
            result = run_in_lab(argv, cpus=cpus, timeout_s=timeout_s, out_dir=out,
                                host_priority=host_priority)
            return Execution(result.release, cpus, True, time.monotonic() - started, result.status,
                             result.host_priority)
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, check=False,
                              stdout=(out / "stdout").open("wb"), stderr=(out / "stderr").open("wb"))
    return Execution(None, os.cpu_count() or 1, False, time.monotonic() - started, done.returncode)
