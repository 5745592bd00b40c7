"""`threadwise show`: a human summary of a capture, and the same as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from threadwise.observe.store import open_capture

_TOP_THREADS_SQL = """
-- CPU time per thread inside the capture window, busiest first.
SELECT t.utid, t.tid, t.tgid, t.name, p.name AS process, t.is_target,
       SUM(s.dur) AS cpu_ns,
       COUNT(*) AS slices
FROM sched_slice s
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
WHERE s.utid <> 0 AND (t.is_target OR NOT ?)
GROUP BY ALL
ORDER BY cpu_ns DESC, t.utid
LIMIT ?
"""


def summarize(path: Path, *, top: int = 10) -> dict[str, Any]:
    with open_capture(path) as con:
        cap = con.execute(
            "SELECT capture_id, host, kernel_release, start_wall, duration_ns, target_kind, "
            "target_spec, target_tgids, tracer_backend, tracer_version, events_recorded, "
            "events_lost, loss_detail, end_reason, notes, schema_version, switch_gaps FROM capture"
        ).fetchall()[0]
        cols = ["capture_id", "host", "kernel_release", "start_wall", "duration_ns", "target_kind",
                "target_spec", "target_tgids", "tracer_backend", "tracer_version", "events_recorded",
                "events_lost", "loss_detail", "end_reason", "notes", "schema_version", "switch_gaps"]
        info: dict[str, Any] = dict(zip(cols, cap, strict=True))
        info["start_wall"] = str(info["start_wall"])
        counts = dict(con.execute(
            "SELECT 'switch', count(*) FROM raw_sched_switch UNION ALL "
            "SELECT 'waking', count(*) FROM raw_sched_waking UNION ALL "
            "SELECT 'migrate', count(*) FROM raw_sched_migrate UNION ALL "
            "SELECT 'new', count(*) FROM raw_task_new UNION ALL "
            "SELECT 'exit', count(*) FROM raw_task_exit UNION ALL "
            "SELECT 'rename', count(*) FROM raw_task_rename").fetchall())
        threads = con.execute(
            "SELECT count(*) FILTER (WHERE is_target), count(*) FILTER (WHERE utid <> 0) FROM thread"
        ).fetchall()[0]
        top_target = _rows(con, _TOP_THREADS_SQL, [True, top])
        top_all = _rows(con, _TOP_THREADS_SQL, [False, top])
        topology = _rows(con, "SELECT cpu, core_key AS core, package_id AS package, smt_siblings, "
                              "llc_id FROM cpu_topology ORDER BY cpu", [])
    duration = info["duration_ns"] or 0
    for row in (*top_target, *top_all):
        row["cpu_share"] = round(row["cpu_ns"] / duration, 4) if duration else 0.0
    info.update(
        events_by_kind=counts,
        events_per_s=round(info["events_recorded"] / (duration / 1e9), 1) if duration else 0.0,
        target_threads=threads[0],
        all_threads=threads[1],
        top_target_threads=top_target,
        top_threads=top_all,
        topology=topology,
    )
    return info


def _rows(con: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
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
