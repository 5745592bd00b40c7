"""Read what placement lint needs from a capture (through observe's `open_capture`)."""

from __future__ import annotations

from pathlib import Path

from threadwise.synthesize.lint import CaptureFacts, ThreadFact

# One row per thread: its name, its process's name, whether it belongs to the
# target workload, and its on-CPU time in the capture window (ns).
_THREADS = """
SELECT t.utid, t.name, p.name AS process_name, COALESCE(t.is_target, FALSE) AS is_target,
       COALESCE(SUM(s.dur), 0) AS cpu_ns
FROM thread t
LEFT JOIN process p ON p.upid = t.upid
LEFT JOIN sched_slice s ON s.utid = t.utid
WHERE t.utid <> 0
GROUP BY t.utid, t.name, p.name, t.is_target
ORDER BY t.utid
"""

# On-CPU slices of the target's threads: [ts, ts + dur) on cpu.
_SLICES = """
SELECT s.cpu, s.ts, s.ts + s.dur AS end_ts, s.utid
FROM sched_slice s JOIN thread t ON t.utid = s.utid
WHERE t.is_target AND s.dur > 0
ORDER BY s.cpu, s.ts
"""

_SIBLINGS = "SELECT cpu, smt_siblings FROM cpu_topology WHERE online ORDER BY cpu"
_DURATION = "SELECT duration_ns FROM capture"


def capture_facts(path: str | Path) -> CaptureFacts:
    """Threads, target slices and SMT siblings of a finished capture."""
    from threadwise.observe.store import open_capture

    with open_capture(path) as con:
        duration = int(con.execute(_DURATION).fetchone()[0] or 0)  # type: ignore[index]
        threads = [
            ThreadFact(int(utid), str(name or ""), process_name, cpu_ns / duration if duration
                       else 0.0, bool(is_target))
            for utid, name, process_name, is_target, cpu_ns in con.execute(_THREADS).fetchall()
        ]
        slices: dict[int, list[tuple[int, int, int]]] = {}
        for cpu, ts, end_ts, utid in con.execute(_SLICES).fetchall():
            slices.setdefault(int(cpu), []).append((int(ts), int(end_ts), int(utid)))
        cores = {tuple(sorted(int(c) for c in sib)) for _, sib in con.execute(_SIBLINGS).fetchall()}
    return CaptureFacts(duration, threads, slices, tuple(sorted(cores)))
