"""Per-thread features: run the SQL modules of this package, return polars frames.

Each query lives in a `.sql` file beside this module (typed, commented
columns; parameters bound by name, never pasted into the text).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import duckdb
import polars as pl


@cache
def sql(name: str) -> str:
    """The text of one of this package's SQL modules."""
    return resources.files("threadwise.analyze").joinpath(f"{name}.sql").read_text()


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


def capture_info(con: duckdb.DuckDBPyConnection) -> CaptureInfo:
    row = con.execute(
        "SELECT capture_id, start_ts, COALESCE(end_ts, start_ts), COALESCE(duration_ns, 0), "
        "COALESCE(events_recorded, 0), COALESCE(events_lost, 0), COALESCE(target_tgids, []), "
        "target_spec, end_reason, notes FROM capture LIMIT 1").fetchone()
    if row is None:
        from threadwise.errors import InputError

        raise InputError("the capture has no capture row (metadata missing)",
                         hint="re-record it with `threadwise observe`")
    topo = con.execute("SELECT count(*), COALESCE(max(len(smt_siblings)), 1) FROM cpu_topology "
                       "WHERE online").fetchone()
    nr_cpus = int(topo[0]) if topo and topo[0] else 0
    if nr_cpus == 0:   # no topology: count the CPUs that switched
        nr_cpus = int(con.execute("SELECT count(DISTINCT cpu) FROM sched_slice").fetchone()[0] or 1)
    # The target's process name: the target process that used the most CPU (ties: lowest pid).
    proc = con.execute(
        "SELECT p.name FROM process p LEFT JOIN thread t ON t.upid = p.upid "
        "LEFT JOIN (SELECT utid, sum(dur) AS ns FROM sched_slice GROUP BY utid) s ON s.utid = t.utid "
        "WHERE p.is_target GROUP BY p.upid, p.pid, p.name ORDER BY sum(COALESCE(s.ns, 0)) DESC, p.pid "
        "LIMIT 1").fetchone()
    # The tracer may stop long after its last event (a stalled host): end the window
    # at the last event then, or every rate is diluted by time nobody observed.
    last = con.execute("SELECT max(ts) FROM (SELECT max(ts) AS ts FROM raw_sched_switch "
                       "UNION ALL SELECT max(ts) FROM raw_sched_waking)").fetchall()[0][0]
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
    )


def thread_features(con: duckdb.DuckDBPyConnection, info: CaptureInfo, *,
                    only_target: bool = True) -> pl.DataFrame:
    return query(con, "thread_features", {"only_target": only_target, "start_ts": info.start_ts,
                                          "end_ts": info.end_ts})


def thread_names(con: duckdb.DuckDBPyConnection, utids: list[int]) -> pl.DataFrame:
    """utid -> name, process, is_target, CPU time (total and on its busiest CPU) of any threads."""
    con.register("_utids", pl.DataFrame({"utid": utids}, schema={"utid": pl.Int64}).to_arrow())
    try:
        return frame(
            con,
            "SELECT t.utid, t.tid, t.name, p.name AS process_name, t.upid, "
            "COALESCE(t.is_target, FALSE) AS is_target, "
            "COALESCE(s.cpu_ns, 0)::BIGINT AS cpu_ns, COALESCE(s.max_cpu_ns, 0)::BIGINT AS max_cpu_ns "
            "FROM thread t JOIN _utids USING (utid) LEFT JOIN process p USING (upid) "
            "LEFT JOIN (SELECT utid, sum(ns) AS cpu_ns, max(ns) AS max_cpu_ns FROM ("
            "             SELECT utid, cpu, sum(dur) AS ns FROM sched_slice "
            "             WHERE utid IN (SELECT utid FROM _utids) GROUP BY utid, cpu) GROUP BY utid"
            "          ) s USING (utid) "
            "ORDER BY t.utid")
    finally:
        con.unregister("_utids")


def cpu_rivals(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return query(con, "cpu_rivals")


def wake_edges(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return query(con, "wake_edges")


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
