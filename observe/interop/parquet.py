"""A capture as Parquet, and back: one file per table in a hive-partitioned tree of a fleet.

Problem: a fleet's captures come from many hosts (docs/fleet.md). One DuckDB file per capture
does not scale past one machine and cannot be read by an engine such as Spark; Parquet can, and
a directory tree partitioned by host and capture (`host=H/capture=C/`) lets one query read a
whole fleet, or one host, by path.

Approach: `export_parquet` writes every table of a finished capture (raw, derived, metadata) as
`ROOT/host=HOST/capture=CAPTURE_ID/TABLE.parquet`, streamed in Arrow record batches (bounded
memory at any capture size) through pyarrow's ParquetWriter. Each file carries in its key-value
metadata the capture's schema version, host, kernel, CPU count and window (start and
end in monotonic ns, and the wall clock at start), and the table's own `CREATE TABLE` statement;
the first file also carries each view's. `import_parquet` reads such a directory back into a new
capture: the statements first (so types, NOT NULLs and defaults are the original's), then each
table's rows, then the views; nothing is inferred. A tree written by anything else is refused with
what it lacks. The round trip is tested table by table (tests/observe/test_parquet.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from threadwise.errors import InputError, UsageError
from threadwise.observe.store import SCHEMA_VERSION, check_output_path, open_capture, temp_path_for
from threadwise.sqlfiles import identifier, statement

FORMAT = "threadwise-capture-parquet-1"
BATCH_ROWS = 1 << 20
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ParquetCapture:
    """Where a capture's Parquet files went, and what they hold."""

    directory: Path
    tables: int
    rows: int
    host: str
    capture_id: str


def _sql(name: str) -> str:
    return statement("threadwise.observe", "sql/interop.sql", name)


def partition(root: Path, host: str, capture_id: str) -> Path:
    """The hive partition of one capture under a fleet's `root`."""
    return root / f"host={_SAFE.sub('_', host)}" / f"capture={_SAFE.sub('_', capture_id)}"


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    cursor = con.execute(_sql("parquet_meta"))
    row = cursor.fetchone()
    if row is None:
        raise InputError("the capture has no capture row",
                         hint="give a capture written by `threadwise observe`")
    names = [d[0] for d in cursor.description]
    meta = {("kernel" if k == "kernel_release" else k): "" if v is None else str(v)
            for k, v in zip(names, row, strict=True)}
    meta["format"] = FORMAT
    return meta


def export_parquet(capture: Path, root: Path, *, force: bool = False,
                   host: str | None = None) -> ParquetCapture:
    """Write `capture` under `root` as `host=H/capture=C/TABLE.parquet`; refuses an existing
    partition unless `force`. `host`: the name the fleet knows the host by, for the partition and
    the metadata (default: the hostname the capture recorded; a container's is often random)."""
    with open_capture(capture) as con:
        meta = _meta(con)
        meta["host"] = host or meta["host"]
        directory = partition(root, meta["host"], meta["capture_id"])
        if directory.exists() and any(directory.iterdir()) and not force:
            raise UsageError(f"{directory} exists", hint="pass --force to replace it")
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.parquet"):
            stale.unlink()
        tables = con.execute(_sql("parquet_tables")).fetchall()
        views = json.dumps(dict(con.execute(_sql("parquet_views")).fetchall()))
        names = [table for table, _ in tables]
        rows = 0
        for table, ddl in tables:
            kv = {**meta, "table": table, "ddl": ddl, "views": views}
            rows += _write_table(con, (table, names), directory / f"{table}.parquet", kv)
    return ParquetCapture(directory, len(tables), rows, meta["host"], meta["capture_id"])


def _write_table(con: duckdb.DuckDBPyConnection, table: tuple[str, list[str]], target: Path,
                 kv: dict[str, str]) -> int:
    """One table (its name, among the capture's) to one Parquet file, batch by batch; its row count."""
    quoted = identifier(*table)
    reader = con.sql(f"SELECT * FROM {quoted}").to_arrow_reader(BATCH_ROWS)
    schema = reader.schema.with_metadata({k.encode(): v.encode() for k, v in kv.items()})
    rows = 0
    with pq.ParquetWriter(target, schema) as writer:
        for batch in reader:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


def _file_meta(path: Path) -> dict[str, str]:
    raw = pq.read_schema(path).metadata or {}
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}


def import_parquet(directory: Path, output: Path, *, force: bool = False) -> ParquetCapture:
    """A capture's Parquet partition (as `export_parquet` wrote it) back into a capture file."""
    files = sorted(directory.glob("*.parquet")) if directory.is_dir() else []
    if not files:
        raise UsageError(f"{directory}: no .parquet files",
                         hint="give one capture's directory, ROOT/host=H/capture=C, as "
                              "`threadwise export --format parquet` writes it")
    metas = {path: _file_meta(path) for path in files}
    strange = [p.name for p, m in metas.items() if m.get("format") != FORMAT or "ddl" not in m]
    if strange:
        raise InputError(f"{directory}: {', '.join(strange[:3])} not written by threadwise export",
                         hint="export a capture: `threadwise export CAPTURE --format parquet -o ROOT`")
    versions = {m["schema_version"] for m in metas.values()}
    if versions != {str(SCHEMA_VERSION)}:
        raise InputError(f"{directory}: capture schema {', '.join(sorted(versions))}, this threadwise "
                         f"writes {SCHEMA_VERSION}", hint="export it again with this threadwise")
    check_output_path(output, force=force)
    temp = temp_path_for(output)
    temp.unlink(missing_ok=True)
    rows = 0
    with duckdb.connect(str(temp)) as con:
        names = [m["table"] for m in metas.values()]
        for path, meta in metas.items():
            con.execute(meta["ddl"])   # the original statement: its types, NOT NULLs and defaults
            rows += _read_table(con, (meta["table"], names), path)
        first = next(iter(metas.values()))
        for ddl in json.loads(first.get("views", "{}")).values():
            con.execute(ddl)
    temp.replace(output)
    return ParquetCapture(output, len(files), rows, first["host"], first["capture_id"])


def _read_table(con: duckdb.DuckDBPyConnection, table: tuple[str, list[str]], path: Path) -> int:
    """One Parquet file's rows appended to its table (its name, among the export's), batch by
    batch; their count."""
    quoted = identifier(*table)
    rows = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
        incoming = pa.Table.from_batches([batch])
        con.register("parquet_batch", incoming)
        con.execute(f"INSERT INTO {quoted} SELECT * FROM parquet_batch")
        con.unregister("parquet_batch")
        rows += batch.num_rows
    return rows
