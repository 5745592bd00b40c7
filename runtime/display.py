"""Human-readable text for apply / status / stop (the JSON forms are the reports' to_json())."""

from __future__ import annotations

import time

from threadwise.runtime.config import ResolvedConfig
from threadwise.runtime.launcher import StatusReport, StopReport
from threadwise.runtime.state import Phase, RunState
from threadwise.runtime.stats import SCX_LAYERED, THREADS
from threadwise.scx import step_interval_ms


def _cpus(cpus: list[int]) -> str:
    if not cpus:
        return "-"
    ranges: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(ranges)


def _exit(state: RunState) -> str:
    report = state.exit
    return f"{report.kind}: {report.message}" if report else "?: ?"


def applied(state: RunState, resolved: ResolvedConfig) -> str:
    if state.phase is Phase.STOPPED:
        return (
            f"applied {resolved.source} for its duration, then stopped ({_exit(state)}); "
            f"sched_ext state {state.state_after}"
        )
    lines = [
        f"attached: {state.ops} after {state.attach_s or 0:.1f} s",
        f"profile:  {resolved.source} ({resolved.kind}"
        + (f", shape {resolved.shape}" if resolved.shape else "")
        + ")",
        f"layers:   {', '.join(resolved.layer_names())}",
        f"flags:    {' '.join(resolved.scx_args) or '(scx_layered defaults)'}",
        f"pids:     supervisor {state.supervisor_pid}, scx_layered {state.scx_pid}",
        "next:     threadwise status | threadwise stop",
    ]
    sized = first_step(resolved)
    return "\n".join(lines if sized is None else [*lines[:4], sized, *lines[4:]])


def first_step(resolved: ResolvedConfig) -> str | None:
    """When the layers that own CPUs get them: at scx_layered's first userspace step, one
    --interval after the attach (docs/lab.md "The first step after an attach"); None without such
    layers (Open layers need no sizing)."""
    # deferred: synthesize's modules, which `threadwise --help` (importing this one) does without
    from threadwise.synthesize.api import KindName

    owning = [spec.name for spec in resolved.config if spec.kind.name is not KindName.OPEN]
    if not owning:
        return None
    step_s = step_interval_ms(resolved.scx_args) / 1000
    return (f"sized:    {', '.join(owning)} get their CPUs at scx_layered's first step, {step_s:g} s "
            f"after the attach (--interval); until then their threads run on any CPU")


def status(result: StatusReport) -> str:
    sched = result.sched_ext
    if not sched.supported:
        head = "sched_ext: not supported by this kernel (use threadwise lab run)"
    else:
        head = f"sched_ext: {sched.state}" + (f" ({sched.ops})" if sched.ops else "")
    lines = [head]
    state = result.applied
    if state is None:
        lines.append("applied:   nothing (threadwise apply PROFILE)")
        return "\n".join(lines)
    lines.append(f"applied:   {state.source} [{state.phase}]")
    if state.phase is Phase.ATTACHED and state.attached_at:
        up = time.time() - state.attached_at
        lines.append(f"attached:  {up:.0f} s ago, after {state.attach_s or 0:.1f} s to attach")
    if state.phase.ended:
        lines.append(f"ended:     {_exit(state)}; sched_ext state then {state.state_after}")
        if state.stop_reason:
            lines.append(f"stopped:   {state.stop_reason}")
        lines.extend(f"kernel:    {line}" for line in state.kernel_log or [])
    if result.layers:
        lines.extend(layer_table(result.layers, result.membership))
    if result.membership:
        lines.append(membership(result.membership))
    if result.problem:
        lines.append(f"problem:   {result.problem}")
    return "\n".join(lines)


TASKS_NOTE = ("tasks: scx_layered's own count (its stats): tasks of any process it has placed in the "
              "layer; it places a task when the task next becomes runnable after the attach "
              "(layered_runnable), so a thread that has slept since then is in no layer and not "
              "counted yet")
UTIL_NOTES = {
    THREADS: ("util%: the CPU time of the layer's threads over the status interval (their "
                "schedstat, by scx_layered's tid -> layer map; 100 = one CPU)"),
    SCX_LAYERED: ("util%: scx_layered's own figure (no tid -> layer map, or no interval); with "
                    "its --interval longer than the status interval, 1.1.4 reads about 6.9 x the "
                    "layer's CPU-seconds over the interval (runtime/stats.py)"),
}
WORKLOAD_NOTE = ("workload: this profile's threads that scx_layered's tid -> layer map holds in the "
                 "layer (per thread below)")


def layer_table(layers: list, found: dict | None) -> list[str]:
    """Per-layer figures; with the workload's threads per layer when membership is known, and what
    each count means, so that no count goes unexplained."""
    rows = (found or {}).get("threads") or []
    in_layer: dict[str, int] = {}
    for row in rows:
        if row.get("actual"):
            in_layer[row["actual"]] = in_layer.get(row["actual"], 0) + 1
    with_workload = bool(rows)
    head = f"{'layer':<16} {'tasks':>6}" + (f" {'workload':>8}" if with_workload else "") + \
        f" {'util%':>7}  cpus"
    lines = [head]
    for layer in layers:
        excl = " (exclusive)" if layer.exclusive else ""
        mine = f" {in_layer.get(layer.name, 0):>8}" if with_workload else ""
        lines.append(f"{layer.name:<16} {layer.tasks:>6}{mine} {layer.util_pct:>7.1f}  "
                     f"{_cpus(layer.cpus)}{excl}")
    lines.append(f"note:      {TASKS_NOTE}")
    for source in sorted({layer.util_source for layer in layers}):
        lines.append(f"note:      {UTIL_NOTES[source]}")
    if with_workload:
        lines.append(f"note:      {WORKLOAD_NOTE}")
    return lines


def membership(found: dict | None) -> str:
    """Target threads per expected layer, with every thread outside its layer named."""
    if not found:
        return "threads:   membership unknown (nothing attached)"
    if found.get("error"):
        return f"threads:   membership unknown: {found['error']}"
    rows = found["threads"]
    if not rows:
        return "threads:   no threads of the profile's workload are running"
    per_layer: dict[str, list[dict]] = {}
    for row in rows:
        per_layer.setdefault(row["expected"] or "(by behaviour)", []).append(row)
    lines = [f"{'group layer':<16} {'threads':>7} {'in it':>6}  outside their layer"]
    for layer, members in per_layer.items():
        inside = sum(1 for row in members if row["actual"] == row["expected"])
        bad = [f"{row['comm']} ({row['tid']}) in "
               + (row["actual"] or ("no layer, though it has run since the re-match" if row.get("ran")
                                    else "no layer (not matched since the attach)"))
               for row in members if not row["ok"]]
        flagged = "MISMATCH: " + ", ".join(bad) if bad else "-"
        lines.append(f"{layer:<16} {len(members):>7} {inside:>6}  {flagged}")
    return "\n".join(lines)


def stopped(result: StopReport) -> str:
    if not result.stopped:
        last = result.last
        tail = f"; last run: {last.phase}, {_exit(last)}" if last and last.exit else ""
        return f"nothing to stop (sched_ext state {result.state_after or 'n/a'}){tail}"
    last = result.last
    return f"stopped: {_exit(last) if last else '?: ?'}; sched_ext state {result.state_after}"
