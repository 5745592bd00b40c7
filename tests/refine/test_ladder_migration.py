"""A ladder file of an older schema is brought to the current one when opened writable, and keeps
its rows; read-only it is refused with the command that migrates it."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from threadwise.errors import InputError
from threadwise.refine.measure import store


def _schema_3(path: Path) -> None:
    """A new ladder file taken back to schema 3: no run.host_priority (what 3 -> 4 adds)."""
    con = store.open_ladder(path)
    con.execute("ALTER TABLE run DROP COLUMN host_priority")
    con.execute("UPDATE ladder_meta SET schema_version = 3")
    con.close()


def test_schema_3_gains_host_priority(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _schema_3(path)
    before = path.read_bytes()
    # read-only: a private copy brought to this schema; the file itself is not written
    con = store.open_ladder(path, read_only=True)
    try:
        assert con.execute("SELECT schema_version FROM ladder_meta").fetchall() == [(store.SCHEMA_VERSION,)]
    finally:
        con.close()
    assert path.read_bytes() == before
    con = store.open_ladder(path)
    try:
        assert con.execute("SELECT schema_version FROM ladder_meta").fetchall() == [(store.SCHEMA_VERSION,)]
        columns = [row[0] for row in con.execute("DESCRIBE run").fetchall()]
        assert {"host_priority", "wall_s"} <= set(columns)
        assert ("screen",) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    finally:
        con.close()
    store.open_ladder(path, read_only=True).close()


def test_a_newer_schema_is_refused_with_what_wrote_it(tmp_path: Path) -> None:
    path = tmp_path / "newer.duckdb"
    store.open_ladder(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE ladder_meta SET schema_version = 99")
    con.close()
    for read_only in (True, False):
        with pytest.raises(InputError, match="schema version 99") as refused:
            store.open_ladder(path, read_only=read_only)
        assert "newer threadwise" in (refused.value.hint or "")
