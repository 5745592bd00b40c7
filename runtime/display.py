"""Human-readable text for apply / status / stop (the JSON forms are the raw dicts)."""

from __future__ import annotations

import time

from threadwise.runtime.config import ResolvedConfig


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


def _exit(state: dict) -> str:
    report = state.get("exit") or {}
    return f"{report.get('kind', '?')}: {report.get('message', '?')}"


def applied(state: dict, resolved: ResolvedConfig) -> str:
    if state.get("phase") == "stopped":
        return (
            f"applied {resolved.source} for its duration, then stopped ({_exit(state)}); "
            f"sched_ext state {state.get('state_after')}"
        )
    lines = [
        f"attached: {state.get('ops')} after {state.get('attach_s', 0):.1f} s",
        f"profile:  {resolved.source} ({resolved.kind}"
        + (f", shape {resolved.shape}" if resolved.shape else "")
        + ")",
        f"layers:   {', '.join(resolved.layer_names())}",
        f"pids:     supervisor {state.get('supervisor_pid')}, scx_layered {state.get('scx_pid')}",
        "next:     threadwise status | threadwise stop",
    ]
    return "\n".join(lines)


def status(result: dict) -> str:
    sched = result["sched_ext"]
    if not sched["supported"]:
        head = "sched_ext: not supported by this kernel (use threadwise lab run)"
    else:
        head = f"sched_ext: {sched['state']}" + (f" ({sched['ops']})" if sched["ops"] else "")
    lines = [head]
    state = result["applied"]
    if not state:
        lines.append("applied:   nothing (threadwise apply PROFILE)")
        return "\n".join(lines)
    phase = state.get("phase")
    lines.append(f"applied:   {state.get('source')} [{phase}]")
    if phase == "attached" and state.get("attached_at"):
        up = time.time() - state["attached_at"]
        lines.append(f"attached:  {up:.0f} s ago, after {state.get('attach_s', 0):.1f} s to attach")
    if phase in ("stopped", "failed"):
        lines.append(f"ended:     {_exit(state)}; sched_ext state then {state.get('state_after')}")
        lines.extend(f"kernel:    {line}" for line in state.get("kernel_log") or [])
    if result.get("layers"):
        lines.append(f"{'layer':<16} {'tasks':>6} {'util%':>7}  cpus")
        for layer in result["layers"]:
            excl = " (exclusive)" if layer["exclusive"] else ""
            lines.append(
                f"{layer['name']:<16} {layer['tasks']:>6} {layer['util_pct']:>7.1f}  "
                f"{_cpus(layer['cpus'])}{excl}"
            )
    if result.get("membership"):
        lines.append(membership(result["membership"]))
    if result.get("problem"):
        lines.append(f"problem:   {result['problem']}")
    return "\n".join(lines)


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
        bad = [f"{row['comm']} ({row['tid']}) in {row['actual'] or 'none'}"
               for row in members if not row["ok"]]
        flagged = "MISMATCH: " + ", ".join(bad) if bad else "-"
        lines.append(f"{layer:<16} {len(members):>7} {inside:>6}  {flagged}")
    return "\n".join(lines)


def stopped(result: dict) -> str:
    if not result["stopped"]:
        last = result.get("last")
        tail = f"; last run: {last.get('phase')}, {_exit(last)}" if last and last.get("exit") else ""
        return f"nothing to stop (sched_ext state {result['state_after'] or 'n/a'}){tail}"
    last = result["last"]
    return f"stopped: {_exit(last)}; sched_ext state {result['state_after']}"
