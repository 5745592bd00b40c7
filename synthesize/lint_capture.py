"""Read what placement lint needs from a capture: analyze's view of its threads.

Threads and their SMT co-running come from analyze (`capture_threads`:
thread_features.sql and smt_corun.sql), so a thread's CPU share, its demand,
whether it is hot and how long it shared a core mean exactly what they mean
in the analysis `synthesize` built the profile from; lint computes none of
them again. A thread's title is its process's (`CaptureThreads.titles`, joined through upid),
the one analyze split title groups by.
"""

from __future__ import annotations

from pathlib import Path

from threadwise.errors import InputError
from threadwise.synthesize.lint import CaptureFacts, ThreadFact, capture_mismatch


def capture_facts(path: str | Path) -> CaptureFacts:
    """The target's threads and their co-running on SMT siblings, from a finished capture."""
    # deferred: loads polars, duckdb and sklearn (analysis), which this module's other callers do without
    from threadwise.analyze import capture_threads

    found = capture_threads(path)
    threads = [
        ThreadFact(int(row["utid"]), str(row["name"] or ""), row["process_name"],
                   float(row["cpu_share"] or 0.0), bool(row["is_target"]), float(row["demand"] or 0.0),
                   found.titles.get(row["upid"]) if row["upid"] is not None else None)
        for row in found.threads.iter_rows(named=True)
    ]
    targets = {t.utid for t in threads if t.is_target}
    # smt_corun has a row per target thread and sibling thread: a pair of targets appears
    # once from each side, with the same time; keep it once, smaller utid first.
    corun = {(int(a), int(b)): int(ns) for a, b, ns in found.corun.select("utid", "other_utid", "corun_ns")
             .iter_rows() if a < b and b in targets}
    return CaptureFacts(found.duration_ns, threads, corun)


def capture_of(process: str | None, path: str | Path, *, instead: str) -> CaptureFacts:
    """The capture's facts, if it is a capture of the workload `process` names (None: a cgroup
    workload, not checked by name); else an InputError saying whose it is. `instead` ends the hint:
    what the caller can do without a capture (lint, the review notebook)."""
    facts = capture_facts(path)
    mismatch = capture_mismatch(process, facts) if process is not None else None
    if mismatch:
        raise InputError(f"{path} is not a capture of this profile's workload: {mismatch}",
                         hint=f"give a capture of {process!r} (e.g. threadwise observe --comm {process} "
                              f"-d 10s -o {process}.duckdb), {instead}")
    return facts
