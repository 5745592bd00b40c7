"""The ladder file's row dataclasses (refine/measure/rows.py) are its tables (sql/ladder.sql), column for
column."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from pathlib import Path

import duckdb
import pytest

from threadwise.refine.measure import store
from threadwise.refine.measure.rows import ROW_TYPES, SampleRow

LADDER_SQL = resources.files("threadwise.refine").joinpath("sql", "ladder.sql").read_text()


def _tables() -> dict[str, list[tuple[str, bool]]]:
    """ladder.sql's tables: name -> [(column, nullable)] in order (comments stripped)."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for name, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", LADDER_SQL, re.S):
        columns = []
        for line in body.splitlines():
            code = line.split("--", 1)[0].strip()
            if code:
                column = code.split()[0]
                columns.append((column, "NOT NULL" not in code))
        found[name] = columns
    return found


def test_every_table_but_the_meta_has_a_row_type():
    assert set(_tables()) - {"ladder_meta"} == set(ROW_TYPES)


@pytest.mark.parametrize("table", sorted(ROW_TYPES))
def test_each_row_type_is_its_table_column_for_column(table: str):
    """Field names and order are the columns; the nullable columns, and only they, default to None."""
    fields = dataclasses.fields(ROW_TYPES[table])
    columns = _tables()[table]
    assert [f.name for f in fields] == [column for column, _ in columns]
    assert [f.default is None for f in fields] == [nullable for _, nullable in columns]


def test_the_parsed_columns_are_the_ones_duckdb_creates():
    con = duckdb.connect()
    try:
        con.execute(LADDER_SQL)
        for table, columns in _tables().items():
            assert con.table(table).columns == [column for column, _ in columns], table
    finally:
        con.close()


def test_insert_takes_typed_rows_or_mappings_checked_by_the_row_type(tmp_path: Path):
    con = store.open_ladder(tmp_path / "ladder.duckdb")
    try:
        store.insert(con, "sample", [SampleRow(run_id=1, idx=0, metric="rps", value=2.0),
                                     {"run_id": 1, "idx": 1, "metric": "rps", "value": 3.0}])
        assert con.table("sample").order("idx").fetchall() == [(1, 0, "rps", 2.0), (1, 1, "rps", 3.0)]
        with pytest.raises(TypeError, match="valu"):
            store.insert(con, "sample", [{"run_id": 1, "idx": 2, "metric": "rps", "valu": 1.0}])
        with pytest.raises(TypeError, match="sample takes SampleRow rows"):
            store.insert(con, "sample", [ROW_TYPES["membership"](run_id=1, idx=0, tid=1, comm="a")])
        with pytest.raises(ValueError, match="not one of the identifiers"):
            store.insert(con, "samples", [])
        assert len(con.table("sample").fetchall()) == 2
    finally:
        con.close()
