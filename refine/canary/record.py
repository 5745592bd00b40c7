"""The canary's record: one DuckDB file per canary (schema: refine/sql/canary_schema.sql).

Every window is written as it ends and every pair's bounds as they are computed, so a canary
that is killed leaves what it measured (and the host on the default scheduler: run.py)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import duckdb

from threadwise.errors import UsageError
from threadwise.sqlfiles import insert_rows, statement

SCHEMA_VERSION = 1


def sql(name: str) -> str:
    return statement("threadwise.refine.sql", "canary.sql", name)


@dataclass(frozen=True)
class CanaryRow:
    started: str  # ISO UTC
    command: str
    profile_path: str
    profile_toml: str
    target: str
    probe: str
    metrics: str  # JSON
    alpha: float
    clip_ratio: float
    window_s: float
    warmup_s: float
    max_duration_s: float
    max_regression: float | None
    host_kernel: str
    scx_version: str
    windows_per_visit: int = 1
    outcome: str | None = None
    reason: str | None = None
    ended: str | None = None


@dataclass(frozen=True)
class WindowRow:
    idx: int
    block: int
    pair: int
    arm: str  # profile | default
    start_s: float
    end_s: float
    sched_ext: str
    others_cpu_s: float
    host_cpus: int
    valid: bool
    note: str | None = None


@dataclass(frozen=True)
class SampleRow:
    window_idx: int
    metric: str
    value: float


@dataclass(frozen=True)
class BoundRow:
    pair: int
    metric: str
    pairs: int
    log_ratio: float
    mean: float
    lower: float
    upper: float
    decision: str


TABLES: dict[str, type] = {"canary": CanaryRow, "canary_window": WindowRow, "sample": SampleRow,
                           "bound": BoundRow}


def create(path: Path, head: CanaryRow, *, force: bool = False) -> duckdb.DuckDBPyConnection:
    """A new record at `path` holding the canary's settings (an existing file only with force)."""
    if path.exists():
        if not force:
            raise UsageError(f"{path} exists", hint="pass --force to replace it, or -o another file")
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    con.execute(resources.files("threadwise.refine").joinpath("sql", "canary_schema.sql").read_text())
    con.execute(sql("insert_meta"), [SCHEMA_VERSION])
    insert_rows(con, "canary", [head], TABLES)
    return con


def add(con: duckdb.DuckDBPyConnection, table: str, rows: list[object]) -> None:
    insert_rows(con, table, rows, TABLES)


def finish(con: duckdb.DuckDBPyConnection, outcome: str, reason: str) -> None:
    con.execute(sql("set_outcome"), [outcome, reason])
