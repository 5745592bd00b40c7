"""A ladder file of an older schema is brought to the current one when opened writable, and keeps
its rows; read-only it is refused with the command that migrates it."""

from __future__ import annotations

from pathlib import Path

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
    with pytest.raises(InputError, match="schema version 3") as refused:
        store.open_ladder(path, read_only=True)
    assert "rejudge" in (refused.value.hint or "")
    con = store.open_ladder(path)
    try:
        assert con.execute("SELECT schema_version FROM ladder_meta").fetchall() == [(store.SCHEMA_VERSION,)]
        columns = [row[0] for row in con.execute("DESCRIBE run").fetchall()]
        assert columns[-1] == "host_priority"
    finally:
        con.close()
    store.open_ladder(path, read_only=True).close()
