"""`threadwise show`: a human summary of a capture, and the same as JSON.

The queries are the named statements of sql/summary.sql; rows become dicts
keyed by the columns each statement declares (no column list repeated here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from threadwise.observe.store import open_capture
from threadwise.sqlfiles import statement


def _sql(name: str) -> str:
    return statement("threadwise.observe", "sql/summary.sql", name)


def summarize(path: Path, *, top: int = 10) -> dict[str, Any]:
    with open_capture(path) as con:
        info: dict[str, Any] = _rows(con, "capture", [])[0]
        info["start_wall"] = str(info["start_wall"])
        counts = {row["kind"]: row["events"] for row in _rows(con, "events_by_kind", [])}
        threads = _rows(con, "thread_counts", [])[0]
        top_target = _rows(con, "top_threads", [True, top])
        top_all = _rows(con, "top_threads", [False, top])
        topology = _rows(con, "topology", [])
    duration = info["duration_ns"] or 0
    for row in (*top_target, *top_all):
        row["cpu_share"] = round(row["cpu_ns"] / duration, 4) if duration else 0.0
    info.update(
        events_by_kind=counts,
        events_per_s=round(info["events_recorded"] / (duration / 1e9), 1) if duration else 0.0,
        target_threads=threads["target"],
        all_threads=threads["seen"],
        top_target_threads=top_target,
        top_threads=top_all,
        topology=topology,
    )
    return info


def _rows(con: Any, name: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(_sql(name), params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def render(info: dict[str, Any]) -> str:
    """Plain text for terminals and logs (no colour codes, stable layout)."""
    duration_s = (info["duration_ns"] or 0) / 1e9
    lines = [
        f"capture    {info['capture_id']}  (schema v{info['schema_version']})",
        f"host       {info['host']}  kernel {info['kernel_release']}",
        f"started    {info['start_wall']} UTC, {duration_s:.2f} s, ended by {info['end_reason']}",
        f"target     {info['target_kind']} {info['target_spec']}  pids {info['target_tgids']}",
        f"tracer     {info['tracer_backend']} {info['tracer_version']}",
        f"events     {info['events_recorded']:,} ({info['events_per_s']:,.0f}/s)  "
        + ", ".join(f"{k} {v:,}" for k, v in info["events_by_kind"].items()),
        f"lost       {info['events_lost']:,}  ({info['loss_detail']}; "
        f"{info['switch_gaps']:,} gaps in the per-CPU switch sequence)",
        f"threads    {info['target_threads']} target, {info['all_threads']} seen on the CPUs",
    ]
    if info["notes"]:
        lines.append(f"notes      {info['notes']}")
    lines += ["", "top target threads by CPU time:",
              f"  {'tid':>7}  {'name':<16} {'cpu s':>8} {'share':>6} {'slices':>7}"]
    for row in info["top_target_threads"]:
        lines.append(f"  {row['tid']:>7}  {row['name'] or '?':<16} {row['cpu_ns'] / 1e9:>8.3f} "
                     f"{row['cpu_share']:>6.2f} {row['slices']:>7}")
    lines += ["", "top threads on the CPUs (any process):"]
    for row in info["top_threads"][:5]:
        lines.append(f"  {row['tid']:>7}  {row['name'] or '?':<16} {row['cpu_ns'] / 1e9:>8.3f} "
                     f"{row['cpu_share']:>6.2f}  ({row['process'] or '?'})")
    lines += ["", "topology:", f"  {'cpu':>4} {'core':>5} {'pkg':>4}  smt siblings   llc"]
    for row in info["topology"]:
        lines.append(f"  {row['cpu']:>4} {row['core']:>5} {row['package']:>4}  "
                     f"{','.join(map(str, row['smt_siblings'])):<14} {row['llc_id']:>3}")
    return "\n".join(lines)
