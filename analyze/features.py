"""Per-thread features: run the SQL modules of this package, return polars frames.

Each query lives in a `.sql` file beside this module (typed, commented
columns; parameters bound by name, never pasted into the text); small ones
share a file as named statements (capture.sql, threadwise.sqlfiles).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from threadwise.analyze.titles import TitleProcess, process_title, title_pattern
from threadwise.errors import InputError
from threadwise.sqlfiles import statements


def sql(name: str, statement: str | None = None) -> str:
    """The text of one of this package's SQL modules (or of one named statement in it)."""
    return statements("threadwise.analyze", f"{name}.sql")[statement or name]


def frame(con: duckdb.DuckDBPyConnection, text: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
    """Run one statement (parameters bound), the result as a polars DataFrame.

    `execute` (not `sql`): it completes results left open by earlier fetchone()
    calls on the connection; the Arrow copy it warns about is of small results.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
        table = con.execute(text, params or {}).to_arrow_table()
    return pl.DataFrame(pl.from_arrow(table))


def query(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
    """Run SQL module `name` with named parameters; the result as a polars DataFrame."""
    return frame(con, sql(name), params)


LATE_STOP_NS = 1_000_000_000   # a capture end this far past the last event is a late stop


@dataclass(frozen=True)
class CaptureInfo:
    capture_id: str
    start_ts: int
    end_ts: int                 # analysis window end (<= the capture's end_ts)
    duration_ns: int            # analysis window length
    capture_end_ts: int         # as recorded
    nr_cpus: int
    smt: bool
    events_recorded: int
    events_lost: int
    target_tgids: list[int]
    target_spec: str
    end_reason: str | None
    notes: str | None
    process_name: str
    cgroup: str | None = None   # the cgroup v2 path observe targeted (`observe --cgroup`)
    cgroup_cpu_quota_us: int | None = None    # its CPU limit (None with a period: no limit)
    cgroup_cpu_period_us: int | None = None   # None: the limit was not read


def capture_info(con: duckdb.DuckDBPyConnection) -> CaptureInfo:
    row = con.execute(sql("capture", "capture_row")).fetchone()
    if row is None:
        raise InputError("the capture has no capture row (metadata missing)",
                         hint="re-record it with `threadwise observe`")
    topo = con.execute(sql("capture", "cpus")).fetchone()
    nr_cpus = int(topo[0]) if topo and topo[0] else 0
    if nr_cpus == 0:   # no topology: count the CPUs that switched
        nr_cpus = int(con.execute(sql("capture", "switched_cpus")).fetchone()[0] or 1)
    proc = con.execute(sql("capture", "target_process")).fetchone()
    # The tracer may stop long after its last event (a stalled host): end the window
    # at the last event then, or every rate is diluted by time nobody observed.
    last = con.execute(sql("capture", "last_event")).fetchall()[0][0]
    start, end = int(row[1]), int(row[2])
    if last is not None and end - int(last) > max(LATE_STOP_NS, (end - start) // 10):
        end = int(last)
    return CaptureInfo(
        capture_id=row[0], start_ts=start, end_ts=end, duration_ns=max(end - start, 0) if end != int(row[2])
        else int(row[3]), capture_end_ts=int(row[2]),
        nr_cpus=nr_cpus, smt=bool(topo and topo[1] and topo[1] > 1),
        events_recorded=int(row[4]), events_lost=int(row[5]), target_tgids=list(row[6]),
        target_spec=row[7], end_reason=row[8], notes=row[9],
        process_name=proc[0] if proc and proc[0] else "",
        cgroup=row[7] if row[10] == "cgroup" else None,
        cgroup_cpu_quota_us=row[11], cgroup_cpu_period_us=row[12],
    )


def thread_features(con: duckdb.DuckDBPyConnection, info: CaptureInfo, *,
                    only_target: bool = True) -> pl.DataFrame:
    return query(con, "thread_features", {"only_target": only_target, "start_ts": info.start_ts,
                                          "end_ts": info.end_ts})


def target_processes(con: duckdb.DuckDBPyConnection) -> dict[int, TitleProcess]:
    """upid -> the title and effective uid of each target process (analyze/titles.py)."""
    rows = con.execute(sql("capture", "target_processes")).fetchall()
    return {int(upid): TitleProcess(int(upid), process_title(cmdline, name),
                                    None if euid is None else int(euid), title_pattern(cmdline, name))
            for upid, name, cmdline, euid in rows}


def process_titles(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """upid -> the whole title (cmdline) of each target process that has one: what a title group's
    pattern selects (titles.title_selects). The same statement `target_processes` reads, so lint
    places a process by the title synthesize grouped it by."""
    rows = con.execute(sql("capture", "target_processes")).fetchall()
    return {int(upid): cmdline for upid, _, cmdline, _ in rows if cmdline is not None}


def thread_names(con: duckdb.DuckDBPyConnection, utids: list[int]) -> pl.DataFrame:
    """utid -> name, process, is_target, CPU time (total and on its busiest CPU) of any threads."""
    con.register("_utids", pl.DataFrame({"utid": utids}, schema={"utid": pl.Int64}).to_arrow())
    try:
        return query(con, "thread_names")
    finally:
        con.unregister("_utids")


def cpu_rivals(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return query(con, "cpu_rivals")


def wake_edges(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return query(con, "wake_edges")


def wake_sources(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """What woke each target thread, by the waker's context (wake_sources.sql, requests.py)."""
    return query(con, "wake_sources")


def smt_corun(con: duckdb.DuckDBPyConnection, *, smt: bool, min_ns: int = 1_000_000) -> pl.DataFrame:
    if not smt:
        return pl.DataFrame(schema={"utid": pl.Int64, "other_utid": pl.Int64, "corun_ns": pl.Int64})
    return query(con, "smt_corun", {"min_ns": min_ns})


def group_percentiles(con: duckdb.DuckDBPyConnection, mapping: pl.DataFrame) -> pl.DataFrame:
    """Slice and run-queue percentiles per group; mapping has utid and group_id."""
    con.register("_group_map", mapping.select(pl.col("utid").cast(pl.Int64),
                                              pl.col("group_id").cast(pl.Int64)).to_arrow())
    try:
        return query(con, "group_features")
    finally:
        con.unregister("_group_map")
