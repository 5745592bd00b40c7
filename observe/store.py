"""The capture file: create, append, finalize, open, migrate.

A capture is one DuckDB file. It is written under a temporary name beside the
final path (`.NAME.tmp-<pid>`) and renamed into place only once finalized, so a
crash or `kill -9` never leaves a half-written file under the final name.
Raw events arrive as Arrow tables and are appended with one INSERT ... SELECT
per batch (no row-by-row inserts); a CHECKPOINT after each batch keeps the WAL
short, because DuckDB's WAL replay has had crash bugs (DESIGN.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from threadwise.errors import InputError, UsageError

SCHEMA_VERSION = 2

# Numbered migrations: version -> (description, step that reaches it from
# version - 1). Version 1 is the base schema (sql/schema_v1.sql). New captures
# are created through the same steps, so every capture of a version has the
# same tables whether it was written new or migrated.
Migration = Callable[[duckdb.DuckDBPyConnection], None]


def _v2_snapshot_read_time(con: duckdb.DuckDBPyConnection) -> None:
    # the schedstat value is from an instant in [ts, ts + read_ns]; NULL: unknown
    con.execute("ALTER TABLE proc_snapshot ADD COLUMN IF NOT EXISTS read_ns BIGINT")


MIGRATIONS: dict[int, tuple[str, Migration]] = {
    2: ("proc_snapshot.read_ns: how long each schedstat read took", _v2_snapshot_read_time),
}

RAW_TABLES = (
    "raw_sched_switch",
    "raw_sched_waking",
    "raw_sched_migrate",
    "raw_task_new",
    "raw_task_exit",
    "raw_task_rename",
    "raw_task_seen",
    "proc_snapshot",
    "raw_lost",
)


def _sql(name: str) -> str:
    return resources.files("threadwise.observe").joinpath("sql", name).read_text()


def temp_path_for(final: Path) -> Path:
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


class CaptureWriter:
    """Writes one capture: schema, metadata, raw batches, then finalize+rename."""

    def __init__(self, final_path: Path, *, force: bool = False) -> None:
        self.final_path = final_path
        check_output_path(final_path, force=force)
        self.temp_path = temp_path_for(final_path)
        with contextlib.suppress(FileNotFoundError):
            self.temp_path.unlink()
        try:
            self.con = duckdb.connect(str(self.temp_path))
        except duckdb.Error as error:
            raise UsageError(f"cannot create a capture in {final_path.parent}: {error}",
                             hint="the directory is not writable; choose another --output") from error
        self.con.execute(_sql("schema_v1.sql"))
        self.con.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, ?)",
            [1, dt.datetime.now(dt.UTC).replace(tzinfo=None), "base schema"],
        )
        _migrate(self.con, 1)
        self.rows: dict[str, int] = dict.fromkeys(RAW_TABLES, 0)

    def append(self, table: str, batch: pa.Table) -> None:
        """Append an Arrow table whose columns match `table` in order."""
        if table not in self.rows:
            raise ValueError(f"not a raw table: {table}")
        if batch.num_rows == 0:
            return
        self.con.register("_batch", batch)
        try:
            self.con.execute(f"INSERT INTO {table} SELECT * FROM _batch")  # table name from RAW_TABLES only
        finally:
            self.con.unregister("_batch")
        self.rows[table] += batch.num_rows

    def checkpoint(self) -> None:
        self.con.execute("CHECKPOINT")

    def insert_rows(self, table: str, columns: list[str], rows: list[tuple]) -> None:
        """Small metadata inserts (topology, capture row), parameters bound."""
        placeholders = ", ".join("?" for _ in columns)
        self.con.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})", rows
        )

    def finalize(self) -> Path:
        """Build derived tables, checkpoint, close, and rename into place."""
        self.con.execute(_sql("finalize.sql"))
        self.con.execute("CHECKPOINT")
        self.con.close()
        os.replace(self.temp_path, self.final_path)
        return self.final_path

    def abandon(self) -> None:
        """Drop the temporary file (nothing worth keeping)."""
        with contextlib.suppress(Exception):
            self.con.close()
        with contextlib.suppress(FileNotFoundError):
            self.temp_path.unlink()
        with contextlib.suppress(FileNotFoundError):
            Path(str(self.temp_path) + ".wal").unlink()


def check_output_path(path: Path, *, force: bool) -> None:
    """Refuse to overwrite, and fail early on an unwritable directory."""
    if path.is_dir():
        raise UsageError(f"output path {path} is a directory", hint="give a file name, e.g. run.duckdb")
    if path.exists() and not force:
        raise UsageError(
            f"capture {path} already exists", hint="choose another --output or pass --force to replace it"
        )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"directory {parent} does not exist",
                         hint="create it first or choose another --output")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"directory {parent} is not writable", hint="choose another --output")


def _migrate(con: duckdb.DuckDBPyConnection, found: int) -> None:
    for version in range(found + 1, SCHEMA_VERSION + 1):
        description, step = MIGRATIONS[version]
        step(con)
        con.execute("UPDATE capture SET schema_version = ?", [version])
        con.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, ?)",
            [version, dt.datetime.now(dt.UTC).replace(tzinfo=None), description],
        )


def schema_version_of(con: duckdb.DuckDBPyConnection) -> int | None:
    try:
        row = con.execute("SELECT max(version) FROM schema_migrations").fetchall()[0]
    except duckdb.CatalogException:
        return None
    return None if row is None else row[0]


@contextlib.contextmanager
def open_capture(path: str | Path, *, read_only: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open a finished capture, checking its schema version (migrating if writable)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"capture {path} not found", hint="record one with `threadwise observe`")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as error:
        text = str(error)
        if "lock" in text.lower():
            raise InputError(f"{path} is in use by another process: {text.splitlines()[0]}",
                             hint="wait for it (a running observe or analyze) to finish") from error
        raise InputError(f"{path} is not a DuckDB capture: {text.splitlines()[0]}") from error
    try:
        version = schema_version_of(con)
        if version is None or not _has_table(con, "capture"):
            raise InputError(f"{path} is a DuckDB file but not a threadwise capture (no schema_migrations)")
        if version > SCHEMA_VERSION:
            raise InputError(
                f"{path} has capture schema {version}, newer than this threadwise ({SCHEMA_VERSION})",
                hint="upgrade threadwise",
            )
        if version < SCHEMA_VERSION:
            if read_only:
                con.close()
                con = duckdb.connect(str(path))
            _migrate(con, version)
        if not _has_table(con, "sched_slice"):
            raise InputError(f"{path} was never finalized (no derived tables)")
        yield con
    finally:
        con.close()


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchall()[0]
    return bool(row and row[0])
