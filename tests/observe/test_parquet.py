"""A capture as Parquet and back (observe/interop/parquet.py): nothing lost, table by table.

The fast tier round-trips a synthetic capture (tests/synthetic/bulk.py); the bpf tier a real
capture of rolesim (the session's `rolesim_capture`, per tracer backend). Each table must come
back with the same columns, types and rows (EXCEPT ALL both ways), the views too, and analyze must
read the same groups from both.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from tests.synthetic.bulk import bulk_capture
from threadwise.analyze import analyze_capture
from threadwise.errors import InputError, UsageError
from threadwise.observe.interop.parquet import FORMAT, export_parquet, import_parquet


def tables(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                       "ORDER BY 1").fetchall()]
    return {name: [(c[0], c[1]) for c in con.execute(f'DESCRIBE "{name}"').fetchall()] for name in names}


def assert_same(original: Path, copy: Path) -> None:
    with duckdb.connect(str(original), read_only=True) as a, duckdb.connect(str(copy), read_only=True) as b:
        assert tables(a) == tables(b)
        views = "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1"
        assert a.execute(views).fetchall() == b.execute(views).fetchall()
    with duckdb.connect(":memory:") as con:
        con.execute(f"ATTACH '{original}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{copy}' AS b (READ_ONLY)")
        for name in tables(duckdb.connect(str(original), read_only=True)):
            for x, y in (("a", "b"), ("b", "a")):
                extra = con.execute(f'SELECT count(*) FROM (SELECT * FROM {x}."{name}" '
                                    f'EXCEPT ALL SELECT * FROM {y}."{name}")').fetchone()[0]
                assert extra == 0, f"{name}: {extra} rows of {x} not in {y}"


def round_trip(capture: Path, tmp: Path) -> Path:
    done = export_parquet(capture, tmp / "fleet")
    assert done.directory.parent.name.startswith("host=") and done.directory.name.startswith("capture=")
    assert done.tables == len(list(done.directory.glob("*.parquet"))) and done.rows > 0
    meta = pq.read_metadata(done.directory / "capture.parquet").metadata
    for key in (b"schema_version", b"host", b"kernel", b"nr_cpus", b"start_ts", b"end_ts", b"start_wall"):
        assert key in meta, key
    assert meta[b"format"].decode() == FORMAT
    back = import_parquet(done.directory, tmp / "back.duckdb")
    assert back.rows == done.rows and back.capture_id == done.capture_id
    assert_same(capture, tmp / "back.duckdb")
    groups_a = analyze_capture(capture).groups
    groups_b = analyze_capture(tmp / "back.duckdb").groups
    assert groups_a.equals(groups_b)
    return done.directory


def test_a_synthetic_capture_round_trips(tmp_path: Path):
    capture = bulk_capture(tmp_path / "bulk.duckdb", switches=20_000)
    directory = round_trip(capture, tmp_path)
    with pytest.raises(UsageError, match="exists"):
        export_parquet(capture, tmp_path / "fleet")
    assert export_parquet(capture, tmp_path / "fleet", force=True).directory == directory
    with pytest.raises(UsageError, match="exists"):
        import_parquet(directory, tmp_path / "back.duckdb")


def test_a_tree_not_written_by_export_is_refused(tmp_path: Path):
    with pytest.raises(UsageError, match=r"no \.parquet files"):
        import_parquet(tmp_path, tmp_path / "x.duckdb")
    duckdb.execute(f"COPY (SELECT 1 AS a) TO '{tmp_path / 'a.parquet'}' (FORMAT parquet)")
    with pytest.raises(InputError, match="not written by threadwise export"):
        import_parquet(tmp_path, tmp_path / "x.duckdb")


@pytest.mark.bpf
def test_a_real_capture_round_trips(rolesim_capture: Path, tmp_path: Path):
    round_trip(rolesim_capture, tmp_path)


def test_the_cli_exports_and_imports_a_parquet_capture(tmp_path: Path):
    import subprocess
    import sys

    def tw(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                              timeout=300, check=False)

    capture = bulk_capture(tmp_path / "bulk.duckdb", switches=5_000)
    done = tw("export", str(capture), "--format", "parquet", "-o", str(tmp_path / "fleet"))
    assert done.returncode == 0, done.stderr
    [directory] = (tmp_path / "fleet").glob("host=*/capture=*")
    assert f"wrote {directory}: " in done.stdout
    back = tw("import", str(directory), "-o", str(tmp_path / "back.duckdb"))
    assert back.returncode == 0, back.stderr
    assert_same(capture, tmp_path / "back.duckdb")
    refused = tw("export", str(capture), "--format", "parquet", "-o", str(tmp_path / "f2"),
                 "--profile", "x.toml")
    assert refused.returncode == 2 and "--profile places threads in a Perfetto trace" in refused.stderr
    refused = tw("import", str(directory), "-o", str(tmp_path / "b2.duckdb"), "--pid", "1")
    assert refused.returncode == 2 and "keeps its target and shape" in refused.stderr
