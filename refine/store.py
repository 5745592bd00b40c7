"""The ladder file: one DuckDB database of runs, arms, cells, samples, membership and decisions.

Schema in `sql/ladder.sql` (typed, commented). Every write binds its values
as parameters; the only names that reach SQL text come from `_TABLES`. The
file is the single source for reports and notebooks: nothing is judged or
reported from memory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from threadwise.errors import InputError

SCHEMA_VERSION = 1
_TABLES = {
    "run": ("run_id", "started", "command", "purpose", "workload", "workload_toml", "primary_metric",
            "primary_direction", "secondary", "levels", "repeats", "arm_order", "seed", "window_s",
            "warmup_s", "host_kernel", "guest_kernel", "vcpus", "tcg", "scx_version", "shape",
            "completed", "stopped_reason"),
    "arm": ("run_id", "arm", "kind", "profile_toml", "config_json", "attach_s"),
    "cell": ("run_id", "idx", "arm", "level", "repeat", "valid", "reasons", "wall_s", "spinner_cpu_s",
             "generator_cpu_s", "scx_cpu_s", "service_cpu_s", "busy_cpu_s", "state_before", "state_after"),
    "sample": ("run_id", "idx", "metric", "value"),
    "membership": ("run_id", "idx", "tid", "comm", "expected_layer", "actual_layer"),
    "comparison": ("run_id", "reference", "candidate", "metric", "level", "reference_median",
                   "candidate_median", "ratio", "ci_low", "ci_high", "n_reference", "n_candidate",
                   "verdict"),
    "step": ("step", "run_id", "candidate", "description", "decision", "reason", "toml_diff", "noise",
             "decision_seed"),
}


def open_ladder(path: Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) a ladder file and check its schema version."""
    if read_only and not path.is_file():
        raise InputError(f"{path}: no such ladder file", hint="threadwise ladder ... -o FILE writes one")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as error:
        raise InputError(f"{path}: not a ladder file ({error})",
                         hint="`threadwise ladder` and `threadwise train` write them") from None
    if not read_only:
        con.execute(resources.files("threadwise.refine").joinpath("sql", "ladder.sql").read_text())
        if con.execute("SELECT count(*) FROM ladder_meta").fetchone() == (0,):
            con.execute("INSERT INTO ladder_meta VALUES (?)", [SCHEMA_VERSION])
    try:
        version = con.execute("SELECT schema_version FROM ladder_meta").fetchone()
    except duckdb.Error:
        con.close()
        raise InputError(f"{path}: not a ladder file (no ladder_meta table)",
                         hint="is this a capture? captures are read by show/analyze") from None
    if version != (SCHEMA_VERSION,):
        con.close()
        raise InputError(f"{path}: ladder schema version {version} (this threadwise reads {SCHEMA_VERSION})")
    return con


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Append rows (dicts keyed by the table's columns) with bound parameters."""
    columns = _TABLES[table]
    if not rows:
        return
    for row in rows:
        unknown = set(row) - set(columns)
        if unknown:
            raise AssertionError(f"{table}: unknown columns {sorted(unknown)}")
    marks = ", ".join("?" for _ in columns)
    con.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                    [[row.get(c) for c in columns] for row in rows])


def next_run_id(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM run").fetchone()[0])


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    workload: str
    primary: tuple[str, str]
    secondary: list[tuple[str, str]]
    levels: list[int]
    seed: int
    tcg: bool
    vcpus: int
    completed: bool
    stopped_reason: str | None


def run_info(con: duckdb.DuckDBPyConnection, run_id: int) -> RunInfo:
    row = con.execute(
        "SELECT workload, primary_metric, primary_direction, secondary, levels, seed, tcg, vcpus, "
        "completed, stopped_reason FROM run WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise InputError(f"no run {run_id} in this ladder file")
    secondary = [(s["metric"], s["direction"]) for s in json.loads(row[3])]
    return RunInfo(run_id, row[0], (row[1], row[2]), secondary, json.loads(row[4]), int(row[5]),
                   bool(row[6]), int(row[7]), bool(row[8]), row[9])


def measured(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, dict[int, dict[str, list[float]]]]:
    """arm -> level -> metric -> samples of VALID cells, in execution order."""
    rows = con.execute(
        "SELECT c.arm, c.level, s.metric, s.value FROM cell c JOIN sample s USING (run_id, idx) "
        "WHERE c.run_id = ? AND c.valid ORDER BY c.idx", [run_id]).fetchall()
    result: dict[str, dict[int, dict[str, list[float]]]] = {}
    arms = [r[0] for r in con.execute("SELECT arm FROM arm WHERE run_id = ?", [run_id]).fetchall()]
    info = run_info(con, run_id)
    for arm in arms:  # every arm and level present, even with no valid cell
        result[arm] = {level: {} for level in info.levels}
    for arm, level, metric, value in rows:
        result.setdefault(arm, {}).setdefault(level, {}).setdefault(metric, []).append(float(value))
    return result
