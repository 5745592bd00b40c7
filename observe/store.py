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
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from threadwise.errors import InputError, UsageError
from threadwise.observe.leftovers import temp_capture_path
from threadwise.observe.procfs import CpuSteal, ThreadSnapshot
from threadwise.observe.schema import RAW_TABLES, SCHEMAS
from threadwise.observe.titles import ProcessTitle
from threadwise.paths import duckdb_kind, file_kind
from threadwise.procs import me
from threadwise.sqlfiles import identifier, insert_rows, statement
from threadwise.topology import CpuInfo

SCHEMA_VERSION = 8

# Numbered migrations: version -> description; the step that reaches it from
# version - 1 is statement `migration_<version>` of sql/migrations.sql.
# Version 1 is the base schema (sql/schema_v1.sql). New captures are created
# through the same steps, so every capture of a version has the same tables
# whether it was written new or migrated.
MIGRATIONS: dict[int, str] = {
    2: "proc_snapshot.read_ns: how long each schedstat read took",
    3: "tracer_counts.dropped: records the tracer counted exactly as dropped (libbpf)",
    4: "capture.cgroup_cpu_quota_us, _period_us, _source: the targeted cgroup's CPU limit",
    5: "cpu_steal: each CPU's steal time beside the proc snapshots",
    6: "proc_snapshot.euid, .egid and process.euid, .egid: each target process's effective ids",
    7: "raw_sched_waking.context, .current_tid and wakeup.context, .current_utid: what woke a thread",
    8: "process_title: each target process's title (cmdline) when first read and when it changed",
}

# Raw event tables (schema.RAW_TABLES) are appended as Arrow batches of schema.SCHEMAS;
# all but raw_task_seen (a first sighting, not a kernel event) count as events.
EVENT_TABLES = tuple(table for table in RAW_TABLES if table != "raw_task_seen")


@dataclass(frozen=True)
class CaptureMeta:
    """The `capture` row (sql/schema_v1.sql): what was captured, how, and what was lost.

    `switch_gaps` is not here: finalize.sql finds the gaps and adds them to the loss.
    """

    capture_id: str            # random uuid
    schema_version: int
    host: str
    kernel_release: str
    start_wall: dt.datetime    # UTC, naive
    start_ts: int              # monotonic ns when tracing was live
    end_ts: int
    duration_ns: int
    target_kind: str           # pid | comm | cgroup | command
    target_spec: str
    target_tgids: list[int]
    tracer_backend: str
    tracer_version: str
    events_recorded: int
    events_lost: int
    loss_detail: str
    end_reason: str            # duration | interrupted | target-exited | tracer-failed
    notes: str | None = None
    # the targeted cgroup's CPU limit (migration 4; `observe --cgroup` only): quota per period
    # in us, quota None with a period = no limit ("max"), all None = not read (see docs/capture.md)
    cgroup_cpu_quota_us: int | None = None
    cgroup_cpu_period_us: int | None = None
    cgroup_cpu_source: str | None = None


@dataclass(frozen=True)
class LossReport:
    """A `raw_lost` row: a loss as the tracer (or a counter mismatch) reported it."""

    ts: int
    source: str
    events: int


@dataclass(frozen=True)
class TracerCount:
    """A `tracer_counts` row: events the kernel counted vs rows that reached the raw table."""

    event: str
    kernel: int
    ingested: int
    dropped: int | None = None  # counted exactly by the tracer (libbpf); None: it cannot tell


# Metadata tables and the record type of their rows: the one statement of
# their columns (the dataclass fields), checked against this whitelist.
Record = CaptureMeta | CpuInfo | ThreadSnapshot | CpuSteal | LossReport | TracerCount | ProcessTitle
RECORD_TABLES: dict[str, type[Record]] = {
    "capture": CaptureMeta, "cpu_topology": CpuInfo, "proc_snapshot": ThreadSnapshot,
    "cpu_steal": CpuSteal, "raw_lost": LossReport, "tracer_counts": TracerCount,
    "process_title": ProcessTitle,
}


def _sql(name: str) -> str:
    return resources.files("threadwise.observe").joinpath("sql", name).read_text()


def _stmt(name: str) -> str:
    return statement("threadwise.observe", "sql/migrations.sql", name)


def temp_path_for(final: Path) -> Path:
    """The partial capture's name, carrying its owner (pid, start time): see leftovers.py."""
    return temp_capture_path(final, *me())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


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
        # Raw tables are sets (readers order what they need): an INSERT that need not keep the
        # batch's row order runs in parallel without reordering, 10-15% faster (benchmarks/ingest.py).
        self.con.execute("SET preserve_insertion_order = false")
        self.con.execute(_sql("schema_v1.sql"))
        self.con.execute(_stmt("record_migration"), [1, _now(), "base schema"])
        _migrate(self.con, 1)
        self.rows: dict[str, int] = dict.fromkeys(RAW_TABLES, 0)

    def append(self, table: str, batch: pa.Table) -> None:
        """Append an Arrow table with the columns of `table` (schema.SCHEMAS), in order."""
        schema = SCHEMAS.get(table)
        if schema is None:
            raise ValueError(f"not a raw table: {table}")
        if batch.schema.names != schema.names:
            raise ValueError(f"{table}: columns {batch.schema.names}, expected {schema.names}")
        if batch.num_rows == 0:
            return
        # the decoders build the exact schema: casting anyway would cost a pass over the batch and,
        # the first time, importing pyarrow.compute (0.2-1 s, inside a capture's finalize time)
        self.con.register("_batch", batch if batch.schema.equals(schema) else batch.cast(schema))
        try:
            self.con.execute(f"INSERT INTO {identifier(table, RAW_TABLES)} SELECT * FROM _batch")
        finally:
            self.con.unregister("_batch")
        self.rows[table] += batch.num_rows

    def checkpoint(self) -> None:
        self.con.execute("CHECKPOINT")

    def insert(self, table: str, records: Sequence[Record]) -> None:
        """Small metadata inserts (topology, capture row, snapshots), parameters bound."""
        insert_rows(self.con, table, records, RECORD_TABLES)

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
        con.execute(_stmt(f"migration_{version}"))
        con.execute(_stmt("set_capture_version"), [version])
        con.execute(_stmt("record_migration"), [version, _now(), MIGRATIONS[version]])


def schema_version_of(con: duckdb.DuckDBPyConnection) -> int | None:
    try:
        row = con.execute(_stmt("schema_version")).fetchall()[0]
    except duckdb.CatalogException:
        return None
    return None if row is None else row[0]


def _check_kind(path: Path) -> None:
    """Name a wrong file kind before DuckDB reports it as an IO error."""
    kind = file_kind(path)
    if kind == "directory":
        raise UsageError(f"{path}: is a directory, not a capture",
                         hint="give a capture file written by `threadwise observe` (.duckdb)")
    if kind != "duckdb":
        what = "it is empty" if kind == "empty" else "it is not a DuckDB file"
        hint = ("this is a text file; a profile (TOML) goes to validate, compile, lint or apply; a capture "
                "is the .duckdb file `threadwise observe` writes" if kind == "text"
                else "give a capture written by `threadwise observe` (.duckdb)")
        raise InputError(f"{path}: not a threadwise capture ({what})", hint=hint)


def _connect(path: Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as error:
        text = str(error)
        if "lock" in text.lower():
            raise InputError(f"{path} is in use by another process: {text.splitlines()[0]}",
                             hint="wait for it (a running observe or analyze) to finish") from error
        raise InputError(f"{path} is not a DuckDB capture: {text.splitlines()[0]}") from error


def _migrated_copy(path: Path, version: int, scratch: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a migrated copy of `path` in `scratch`; `path` is never written.

    Reading an old capture must work on a file we may not (or must not) write:
    a shared capture, another user's, a read-only mount.
    """
    copy = scratch / path.name
    try:
        shutil.copyfile(path, copy)
        if Path(f"{path}.wal").exists():
            shutil.copyfile(f"{path}.wal", f"{copy}.wal")
    except OSError as error:
        raise InputError(
            f"{path} has capture schema {version} and needs migrating, but a copy to migrate "
            f"could not be made in {scratch.parent}: {error.strerror}",
            hint=f"free space in {scratch.parent} (TMPDIR), or open it writable once: "
                 f"`threadwise analyze {path}` migrates it in place",
        ) from error
    con = _connect(copy, read_only=False)
    try:
        _migrate(con, version)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return _connect(copy, read_only=True)


@contextlib.contextmanager
def open_capture(path: str | Path, *, read_only: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open a finished capture, checking its schema version.

    An older capture is migrated: in place when opened writable, else in a
    temporary copy (read_only never writes the file).
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"capture {path} not found", hint="record one with `threadwise observe`")
    _check_kind(path)
    con = _connect(path, read_only=read_only)
    scratch: Path | None = None
    try:
        version = schema_version_of(con)
        if version is None or not has_table(con, "capture"):
            what = duckdb_kind(path) if version is None else "a DuckDB file"
            raise InputError(f"{path}: not a threadwise capture (it is {what}, with no capture tables)",
                             hint="give a capture written by `threadwise observe`")
        if version > SCHEMA_VERSION:
            raise InputError(
                f"{path} has capture schema {version}, newer than this threadwise ({SCHEMA_VERSION})",
                hint="upgrade threadwise",
            )
        if version < SCHEMA_VERSION:
            if read_only:
                con.close()
                scratch = Path(tempfile.mkdtemp(prefix="threadwise-migrate-"))
                con = _migrated_copy(path, version, scratch)
            else:
                _migrate(con, version)
        if not has_table(con, "sched_slice"):
            raise InputError(f"{path} was never finalized (no derived tables)")
        yield con
    finally:
        con.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(_stmt("has_table"), [name]).fetchall()[0]
    return bool(row and row[0])
