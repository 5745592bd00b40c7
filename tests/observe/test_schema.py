"""The raw tables' Arrow schemas come from the SQL: they agree with a capture's tables, and a
column added to the SQL (in schema_v1.sql or by a migration) reaches them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from threadwise.observe.schema import RAW_TABLES, SCHEMAS, arrow_schemas, capture_ddl, table_from_rows
from threadwise.observe.store import CaptureWriter


def test_schemas_match_a_new_captures_tables(tmp_path):
    """Names, order and types as DuckDB itself exports the tables, so batches append uncast."""
    writer = CaptureWriter(tmp_path / "c.duckdb")
    try:
        assert tuple(SCHEMAS) == RAW_TABLES
        for table in RAW_TABLES:
            exported = writer.con.sql(f'SELECT * FROM "{table}" LIMIT 0').to_arrow_table().schema
            assert exported.equals(SCHEMAS[table]), table
            writer.append(table, table_from_rows(table, []))
    finally:
        writer.abandon()


def test_a_column_added_to_the_sql_reaches_the_arrow_schema():
    base, *migrations = capture_ddl()
    widened = base.replace("dest_cpu INTEGER NOT NULL\n", "dest_cpu INTEGER NOT NULL,\n    hops SMALLINT\n")
    assert widened != base
    schema = arrow_schemas([widened, *migrations], ["raw_sched_migrate"])["raw_sched_migrate"]
    assert schema.names == [*SCHEMAS["raw_sched_migrate"].names, "hops"]
    assert schema.field("hops").type == pa.int16()
    migrated = arrow_schemas([*capture_ddl(), "ALTER TABLE raw_task_seen ADD COLUMN cgroup VARCHAR;"])
    assert migrated["raw_task_seen"].names[-1] == "cgroup"


def test_a_type_without_an_arrow_type_is_named():
    ddl = [*capture_ddl(), "ALTER TABLE raw_task_exit ADD COLUMN seen_at TIMESTAMP;"]
    with pytest.raises(ValueError, match=r"raw_task_exit\.seen_at: SQL type TIMESTAMP"):
        arrow_schemas(ddl)
