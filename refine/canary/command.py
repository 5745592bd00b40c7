"""`threadwise canary`: what the command does between its options and the loop.

The workload file gives what the training judged by: the target process, the objective (primary
and secondary metrics, their directions, the window) and the parser of the load's output, which
the probe reuses; the options give the probe's source, the margins and the guards.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from threadwise.errors import CanaryRolledBack, MissingTool, UsageError
from threadwise.refine.canary import record
from threadwise.refine.canary.probe import CommandProbe, LogProbe, Probe, PrometheusProbe
from threadwise.refine.canary.run import Outcome, Result, Settings, run_canary
from threadwise.refine.canary.sequence import CLIP_RATIO, Metric
from threadwise.refine.canary.summary import write_summary
from threadwise.refine.canary.switch import LayeredSwitch
from threadwise.refine.measure.workload import Workload, load_workload, resolve_workload
from threadwise.runtime.scx import require_sched_ext
from threadwise.runtime.state import RunFiles
from threadwise.scx import SCX_LAYERED_VERSION
from threadwise.shape import Shape


class CanaryOptions(BaseModel):
    """What a canary was asked to do, typed as the command line's options became (durations in
    seconds, margins as ratios, the machine shape the profile is compiled for)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    profile: Path
    workload: str  # a workload file or a bundled name
    shape: InstanceOf[Shape]
    margin: float  # every metric's, unless `margins` has its own
    max_duration_s: float
    alpha: float
    out: Path  # the canary's record
    command: str  # the command line, for the record
    margins: dict[str, float] = Field(default_factory=dict)
    pid: int | None = None
    probe_log: Path | None = None
    probe_command: list[str] | None = None
    max_regression: float | None = None
    window_s: float | None = None
    warmup_s: float | None = None
    windows_per_visit: Annotated[int, Field(ge=1)] = 1
    attach_timeout_s: float = 120.0
    force: bool = False


def find_pid(process: str) -> int:
    """The one running process whose comm is `process` (a canary judges one live service)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == process:
                    found.append(int(entry.name))
            except OSError:
                continue
    if len(found) != 1:
        raise UsageError(f"{len(found)} running processes are named {process!r}"
                         + (f" (pids {', '.join(map(str, sorted(found)))})" if found else ""),
                         hint="pass --pid PID for the service to judge")
    return found[0]


def metrics_of(workload: Workload, margin: float,
               margins: dict[str, float] | None = None) -> tuple[Metric, ...]:
    """The objective's metrics as the canary judges them: `margin` each, or its own from `margins`."""
    objective = workload.objective
    names = [m.metric for m in objective.metrics()]
    unknown = sorted(set(margins or {}) - set(names))
    if unknown:
        raise UsageError(f"--margin names {', '.join(unknown)}, not a metric of workload {workload.name}",
                         hint=f"its objective's metrics: {', '.join(names)}")
    own = margins or {}
    return (Metric(objective.primary.metric, objective.primary.direction == "higher",
                   own.get(objective.primary.metric, margin), primary=True),
            *(Metric(m.metric, m.direction == "higher", own.get(m.metric, margin))
              for m in objective.secondary))


def probe_of(options: CanaryOptions, workload: Workload) -> Probe:
    """The command line's probe, else the workload file's `[probe]` table."""
    parser = workload.load.parser
    if options.probe_log is not None and options.probe_command is not None:
        raise UsageError("give one probe: --probe-log FILE or --probe-command 'CMD ...', not both")
    if options.probe_log is not None:
        return LogProbe(options.probe_log, parser)
    if options.probe_command is not None:
        return CommandProbe(list(options.probe_command), parser)
    if workload.probe is None:
        raise UsageError(f"workload {workload.name} names no probe, and none was given",
                         hint="add a [probe] table (log = FILE, or command = [...]) to the workload file, "
                              "or pass --probe-log FILE / --probe-command 'CMD ...'; it is read with the "
                              f"workload's parser ({parser}), as the training read its load")
    if workload.probe.log is not None:
        return LogProbe(Path(workload.probe.log), parser)
    if workload.probe.prometheus is not None:
        # load_workload refused a [probe.series] without every objective metric (with its line)
        wanted = [m.metric for m in workload.objective.metrics()]
        return PrometheusProbe(workload.probe.prometheus,
                               {m: workload.probe.series[m] for m in wanted})
    return CommandProbe(list(workload.probe.command or []), parser)


def canary(options: CanaryOptions, *, progress: Callable[[str], None] = print) -> Result:
    """Judge `options.profile` on the live service; raises CanaryRolledBack unless it was kept
    (KeyboardInterrupt when a signal ended it, after the rollback)."""
    if not options.profile.is_file():
        raise UsageError(f"{options.profile}: no such profile",
                         hint="the profile train wrote: profiles/NAME.toml")
    workload = load_workload(resolve_workload(options.workload))
    metrics = metrics_of(workload, options.margin, options.margins)
    probe = probe_of(options, workload)
    pid = options.pid or find_pid(workload.target.process)
    try:
        require_sched_ext()
    except MissingTool as missing:   # the lab cannot stand in: a canary judges *this* host's service
        raise MissingTool(missing.message, hint=(
            "a canary judges the profile on the host its service runs on, and needs sched_ext there "
            "(Linux 6.12 or later with CONFIG_SCHED_CLASS_EXT=y); on this host the lab VM judges it "
            f"under the workload's own load instead: threadwise ladder {options.workload} "
            f"--arm {options.profile} --lab")) from None
    settings = Settings(metrics, options.window_s or workload.objective.window_s,
                        workload.objective.warmup_s if options.warmup_s is None else options.warmup_s,
                        options.max_duration_s, options.max_regression, options.alpha, CLIP_RATIO,
                        options.windows_per_visit)
    switch = LayeredSwitch(options.profile, options.shape, RunFiles.default(), options.attach_timeout_s)
    head = record.CanaryRow(
        datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"), options.command, str(options.profile),
        options.profile.read_text(errors="replace"), f"pid {pid} ({workload.target.process})",
        probe.describe(),
        json.dumps([{"metric": m.name, "direction": "higher" if m.higher_is_better else "lower",
                     "margin": m.margin, "primary": m.primary} for m in metrics]),
        options.alpha, CLIP_RATIO, settings.window_s, settings.warmup_s, options.max_duration_s,
        options.max_regression, platform.release(), SCX_LAYERED_VERSION, options.windows_per_visit)
    con = record.create(options.out, head, force=options.force)
    try:
        progress(f"canary: {options.profile} on pid {pid} ({workload.target.process}), {probe.describe()}; "
                 f"{settings.window_s:g} s windows after {settings.warmup_s:g} s warm-up, ABBA, at most "
                 f"{options.max_duration_s:g} s; record {options.out}")
        result = run_canary(switch, probe, settings, con, target_pid=pid, progress=progress)
        progress(f"canary: summary {write_summary(con, options.out)}")
    finally:
        con.close()
    if result.outcome is Outcome.INTERRUPTED:
        raise KeyboardInterrupt
    if result.outcome is not Outcome.KEPT:
        raise CanaryRolledBack(f"{result.reason} ({result.pairs} pairs, {result.windows} windows, "
                               f"{result.seconds:.0f} s)", hint=f"the evidence: {options.out}")
    return result
