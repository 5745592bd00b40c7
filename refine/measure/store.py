"""The ladder file: one DuckDB database of runs, arms, cells, samples, membership and decisions.

Schema in `sql/ladder.sql` (typed, commented), queries in `sql/queries.sql`
(named statements, `sql(name)`). Rows are typed (`rows.py`, one dataclass per
table, its fields the table's columns): `insert` derives its column list from
them. Every write binds its values as parameters; the only names that reach
SQL text are `rows.ROW_TYPES`' tables and their fields (through `identifier`).
The file is the single source for reports and notebooks: nothing is judged or
reported from memory.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from threadwise.errors import InputError
from threadwise.refine.measure.rows import ROW_TYPES, LadderRow
from threadwise.refine.measure.stats import Measured, Obs
from threadwise.sqlfiles import insert_rows, statement

SCHEMA_VERSION = 7
# version -> the script that brings a file of that version to the next (sql/)
MIGRATIONS = {1: "migrate_1_2.sql", 2: "migrate_2_3.sql", 3: "migrate_3_4.sql", 4: "migrate_4_5.sql",
              5: "migrate_5_6.sql", 6: "migrate_6_7.sql"}


def sql(name: str) -> str:
    """A named statement of `sql/queries.sql` (the refine stage's queries)."""
    return statement("threadwise.refine", "sql/queries.sql", name)


def check_output(path: Path) -> None:
    """Refuse, before anything is measured, a ladder output that `open_ladder` would refuse after
    (a missing directory, a capture, a newer schema): the lab's minutes are not spent for nothing."""
    if path.exists():
        open_ladder(path).close()
    else:
        _require_directory(path)


def _require_directory(path: Path) -> None:
    """A ladder file's directory must exist: duckdb's own message for a missing one reads like a
    damaged file ("not a ladder file")."""
    if not path.parent.is_dir():
        raise InputError(f"{path}: its directory {path.parent} does not exist",
                         hint=f"create it (mkdir -p {path.parent}) or choose another -o")


def open_ladder(path: Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) a ladder file and check its schema version."""
    if read_only and not path.is_file():
        raise InputError(f"{path}: no such ladder file", hint="threadwise ladder ... -o FILE writes one")
    existed = path.is_file()
    if not read_only:
        _require_directory(path)
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as error:
        raise InputError(f"{path}: not a ladder file ({error})",
                         hint="`threadwise ladder` and `threadwise train` write them") from None
    sql_dir = resources.files("threadwise.refine").joinpath("sql")
    if existed and not read_only and ("ladder_meta",) not in con.execute(sql("tables")).fetchall():
        con.close()  # never write ladder tables into another kind of file (a capture, say)
        raise InputError(f"{path}: not a ladder file (no ladder_meta table)",
                         hint="is this a capture? captures are read by show/analyze")
    if not read_only:
        con.execute(sql_dir.joinpath("ladder.sql").read_text())
        if con.execute(sql("meta_rows")).fetchone() == (0,):
            con.execute(sql("insert_meta"), [SCHEMA_VERSION])
    try:
        version = con.execute(sql("schema_version")).fetchone()
    except duckdb.Error:
        con.close()
        raise InputError(f"{path}: not a ladder file (no ladder_meta table)",
                         hint="is this a capture? captures are read by show/analyze") from None
    while not read_only and version is not None and version[0] in MIGRATIONS:
        con.execute(sql_dir.joinpath(MIGRATIONS[version[0]]).read_text())
        version = con.execute(sql("schema_version")).fetchone()
    if read_only and version is not None and version[0] in MIGRATIONS:
        con.close()
        return _migrated_copy(path)
    if version != (SCHEMA_VERSION,):
        con.close()
        old = version is not None and version[0] in MIGRATIONS
        raise InputError(f"{path}: ladder schema version {version[0] if version else '?'} "
                         f"(this threadwise reads {SCHEMA_VERSION})",
                         hint="open it once writable (e.g. `threadwise rejudge FILE`) to migrate it"
                         if old else "written by a newer threadwise")
    return con


def _migrated_copy(path: Path) -> duckdb.DuckDBPyConnection:
    """An older ladder file read without writing it: a private copy brought to this schema, open
    read-only (the copy is unlinked at once; the open connection keeps it until closed)."""
    with tempfile.TemporaryDirectory(prefix="threadwise-ladder-") as scratch:
        copy = Path(scratch) / path.name
        shutil.copyfile(path, copy)
        open_ladder(copy).close()
        return duckdb.connect(str(copy), read_only=True)


def insert(con: duckdb.DuckDBPyConnection, table: str,
           rows: Sequence[LadderRow | Mapping[str, Any]]) -> None:
    """Append rows of `table` with bound parameters: its row dataclass (rows.py), or a mapping
    of that dataclass's fields, built into one first (a misspelt or missing column is a
    TypeError there, before anything is written)."""
    kind = ROW_TYPES.get(table)   # an unknown table is insert_rows' ValueError
    typed = [kind(**row) if kind is not None and isinstance(row, Mapping) else row for row in rows]
    insert_rows(con, table, typed, ROW_TYPES)


def next_run_id(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute(sql("next_run_id")).fetchone()[0])


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    workload: str
    primary: tuple[str, str]
    secondary: list[tuple[str, str]]
    levels: list[int]
    repeats: int
    seed: int
    tcg: bool
    vcpus: int
    completed: bool
    stopped_reason: str | None


def run_info(con: duckdb.DuckDBPyConnection, run_id: int) -> RunInfo:
    row = con.execute(sql("run_info"), [run_id]).fetchone()
    if row is None:
        raise InputError(f"no run {run_id} in this ladder file")
    secondary = [(s["metric"], s["direction"]) for s in json.loads(row[3])]
    return RunInfo(run_id, row[0], (row[1], row[2]), secondary, json.loads(row[4]), int(row[10]),
                   int(row[5]), bool(row[6]), int(row[7]), bool(row[8]), row[9])


def measured(con: duckdb.DuckDBPyConnection, run_id: int) -> Measured:
    """arm -> level -> metric -> repeat -> Obs(value, host denied share) of VALID cells."""
    rows = con.execute(sql("valid_samples"), [run_id]).fetchall()
    result: Measured = {}
    arms = [r[0] for r in con.execute(sql("run_arms"), [run_id]).fetchall()]
    info = run_info(con, run_id)
    for arm in arms:  # every arm and level present, even with no valid cell
        result[arm] = {level: {} for level in info.levels}
    for arm, level, repeat, metric, value, denied in rows:
        result.setdefault(arm, {}).setdefault(level, {}).setdefault(metric, {})[int(repeat)] = Obs(
            float(value), None if denied is None else float(denied))
    return result
