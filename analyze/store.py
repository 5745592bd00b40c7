"""Store an Analysis back into its capture file, under a versioned schema.

Tables are named `analysis_*` and replaced as a whole on every run (an
analysis is derived data: the latest run wins). `analysis_meta` carries the
analysis schema version, so readers can tell what they are looking at. The
capture is opened read-write only here, for the few statements that write;
frames go in through Arrow (no row-by-row inserts), then a CHECKPOINT keeps
the WAL empty (DESIGN.md: DuckDB WAL replay bugs).
"""

from __future__ import annotations

import datetime as dt
import os
import warnings
from pathlib import Path

import polars as pl

from threadwise.analyze.model import ANALYSIS_SCHEMA_VERSION, Analysis
from threadwise.errors import InputError, UsageError
from threadwise.observe.store import open_capture
from threadwise.sqlfiles import identifier, statement

TABLES = ("analysis_meta", "analysis_groups", "analysis_threads", "analysis_wake_edges",
          "analysis_chains", "analysis_preemptors")


def _sql(name: str) -> str:
    return statement("threadwise.analyze", "store.sql", name)


def store_analysis(analysis: Analysis, path: str | Path | None = None) -> Path:
    """Write the analysis_* tables into the capture (replacing earlier ones)."""
    target = Path(path or analysis.capture_path or "")
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"cannot store the analysis: {target} is not writable",
                         hint="pass --no-store, or analyze a copy you can write")
    meta = pl.DataFrame({
        "analysis_schema_version": [ANALYSIS_SCHEMA_VERSION],
        "capture_id": [analysis.capture_id],
        "analyzed_at": [dt.datetime.now(dt.UTC).replace(tzinfo=None)],
        "process_name": [analysis.process_name],
        "duration_ns": [analysis.duration_ns],
        "nr_cpus": [analysis.nr_cpus],
        "events_lost": [analysis.events_lost],
        "names_separate_roles": [analysis.names_separate_roles],
        "caveats": [analysis.caveats],
        "cgroup": [analysis.cgroup],
        "cgroup_cpu_quota_us": [analysis.cgroup_cpu_quota_us],
        "cgroup_cpu_period_us": [analysis.cgroup_cpu_period_us],
    }, schema={"analysis_schema_version": pl.Int32, "capture_id": pl.String,
               "analyzed_at": pl.Datetime("us"), "process_name": pl.String, "duration_ns": pl.Int64,
               "nr_cpus": pl.Int32, "events_lost": pl.Int64, "names_separate_roles": pl.Boolean,
               "caveats": pl.List(pl.String), "cgroup": pl.String, "cgroup_cpu_quota_us": pl.Int64,
               "cgroup_cpu_period_us": pl.Int64})
    frames = {
        "analysis_meta": meta,
        "analysis_groups": analysis.groups,
        "analysis_threads": analysis.threads,
        "analysis_wake_edges": analysis.wake_edges,
        "analysis_chains": analysis.chains,
        "analysis_preemptors": analysis.preemptors,
    }
    with open_capture(target, read_only=False) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            for table, frame in frames.items():
                name = identifier(table, TABLES)
                con.execute(f"DROP TABLE IF EXISTS {name}")
                con.register("_frame", frame.to_arrow())
                try:
                    con.execute(f"CREATE TABLE {name} AS SELECT * FROM _frame")
                finally:
                    con.unregister("_frame")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("CHECKPOINT")
    return target


def load_analysis(path: str | Path) -> Analysis | None:
    """The analysis stored in a capture (no recomputation), or None if there is none.

    Raises InputError when the stored analysis has a schema version this
    threadwise does not know (re-run `threadwise analyze` to replace it).
    """
    version = stored_version(path)
    if version is None:
        return None
    if version != ANALYSIS_SCHEMA_VERSION:
        raise InputError(f"{path} holds analysis schema {version}, this threadwise reads "
                         f"{ANALYSIS_SCHEMA_VERSION}", hint=f"re-run `threadwise analyze {path}`")
    with open_capture(path) as con:
        def table(name: str) -> pl.DataFrame:
            table = con.execute(f"SELECT * FROM {identifier(name, TABLES)}").to_arrow_table()
            return pl.DataFrame(pl.from_arrow(table))

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
            meta = table("analysis_meta").row(0, named=True)
            frames = {name: table(name) for name in TABLES[1:]}
    return Analysis(
        groups=frames["analysis_groups"], process_name=meta["process_name"],
        duration_ns=meta["duration_ns"], nr_cpus=meta["nr_cpus"], events_lost=meta["events_lost"],
        caveats=list(meta["caveats"] or []), threads=frames["analysis_threads"],
        wake_edges=frames["analysis_wake_edges"], chains=frames["analysis_chains"],
        preemptors=frames["analysis_preemptors"], capture_id=meta["capture_id"], capture_path=Path(path),
        names_separate_roles=meta["names_separate_roles"],
        # absent from analyses stored before issue 11 (additive columns: .get)
        cgroup=meta.get("cgroup"), cgroup_cpu_quota_us=meta.get("cgroup_cpu_quota_us"),
        cgroup_cpu_period_us=meta.get("cgroup_cpu_period_us"))


def stored_version(path: str | Path) -> int | None:
    """The analysis schema version stored in a capture, or None if never analyzed."""
    with open_capture(path) as con:
        found = con.execute(_sql("has_analysis")).fetchall()
        if not found or not found[0][0]:
            return None
        row = con.execute(_sql("stored_version")).fetchall()
    return int(row[0][0]) if row and row[0][0] is not None else None
