"""The raw tables' Arrow schemas, derived from the SQL that declares them.

Problem: the tracers' decoders (stream.py, records.py, interop/) build Arrow
batches that are appended to the raw tables as they are; a column written in
both the SQL and Python drifts.
Approach: sql/schema_v1.sql (with sql/migrations.sql's steps, as a new capture
gets them) is the one declaration. It is run in a scratch in-memory DuckDB,
whose catalog gives each raw table's columns in order; a small map turns the
DuckDB type names into Arrow types, and a type outside the map is an error
that names the column (add it to the map, never guess). Columns are nullable,
as DuckDB's own Arrow export makes them, so a batch appends without a cast.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources

import duckdb
import pyarrow as pa

from threadwise.sqlfiles import statement, statements

# The raw event tables: appended as Arrow batches of these schemas (store.CaptureWriter.append).
RAW_TABLES = ("raw_sched_switch", "raw_sched_waking", "raw_sched_migrate", "raw_task_new",
              "raw_task_exit", "raw_task_rename", "raw_task_seen")

# DuckDB type name -> Arrow type: the types raw tables use (and near kin). Times and ids are
# integers (BIGINT ns, INTEGER tid/cpu); clone flags are a u64 bit set.
ARROW_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
}

# clone(2) flag: a raw_task_new row with it is a thread of its parent's process (tgid =
# parent_tgid), without it a new process (tgid = tid).
CLONE_THREAD = 0x10000

_MIGRATION = re.compile(r"^migration_(\d+)$")


def capture_ddl() -> list[str]:
    """The statements that make a new capture's tables: the base schema, then each migration."""
    package = "threadwise.observe"
    base = resources.files(package).joinpath("sql", "schema_v1.sql").read_text(encoding="utf-8")
    steps = sorted((int(m.group(1)), name) for name in statements(package, "sql/migrations.sql")
                   if (m := _MIGRATION.match(name)))
    return [base, *(statement(package, "sql/migrations.sql", name) for _, name in steps)]


def arrow_schemas(ddl: Sequence[str], tables: Sequence[str] = RAW_TABLES) -> dict[str, pa.Schema]:
    """The Arrow schema of each of `tables` as the SQL statements `ddl` declare them."""
    con = duckdb.connect(":memory:")
    try:
        for text in ddl:
            con.execute(text)
        schemas = {}
        for table in tables:
            columns = con.execute(statement("threadwise.observe", "sql/catalog.sql", "table_columns"),
                                  [table]).fetchall()
            if not columns:
                raise ValueError(f"the capture schema has no table {table}")
            schemas[table] = pa.schema([(name, _arrow_type(table, name, kind)) for name, kind in columns])
        return schemas
    finally:
        con.close()


def _arrow_type(table: str, column: str, kind: str) -> pa.DataType:
    if kind not in ARROW_TYPES:
        raise ValueError(f"{table}.{column}: SQL type {kind} has no Arrow type in schema.ARROW_TYPES")
    return ARROW_TYPES[kind]


# Arrow schemas of the raw tables, in their column order.
SCHEMAS: dict[str, pa.Schema] = arrow_schemas(capture_ddl())


def table_from_rows(name: str, rows: Sequence[tuple]) -> pa.Table:
    """Rows (tuples in the raw table's column order) as an Arrow table of SCHEMAS[name]."""
    schema = SCHEMAS[name]
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.table([list(column) for column in columns], schema=schema)
