"""Read what placement lint needs from a capture.

Threads come from analyze's per-thread features (`capture_threads`), so a
thread's CPU share, its demand and whether it is hot mean exactly what they
mean in the analysis `synthesize` built the profile from. Slices and SMT
siblings come from this stage's own SQL module (lint_capture.sql), read
through observe's `open_capture`.
"""

from __future__ import annotations

from pathlib import Path

from threadwise.sqlfiles import statement
from threadwise.synthesize.lint import CaptureFacts, ThreadFact


def _sql(name: str) -> str:
    return statement("threadwise.synthesize", "lint_capture.sql", name)


def capture_facts(path: str | Path) -> CaptureFacts:
    """Target threads (analyze's features), their slices and the SMT siblings of a capture."""
    from threadwise.analyze import capture_threads
    from threadwise.observe.store import open_capture

    found = capture_threads(path)
    threads = [
        ThreadFact(int(row["utid"]), str(row["name"] or ""), row["process_name"],
                   float(row["cpu_share"] or 0.0), bool(row["is_target"]), float(row["demand"] or 0.0))
        for row in found.threads.iter_rows(named=True)
    ]
    with open_capture(path) as con:
        slices: dict[int, list[tuple[int, int, int]]] = {}
        for cpu, ts, end_ts, utid in con.execute(_sql("target_slices")).fetchall():
            slices.setdefault(int(cpu), []).append((int(ts), int(end_ts), int(utid)))
        cores = {tuple(sorted(int(c) for c in sib)) for _, sib in con.execute(_sql("siblings")).fetchall()}
    return CaptureFacts(found.duration_ns, threads, slices, tuple(sorted(cores)))
