"""Rebuild a capture from what a killed `observe` had already recorded.

Problem: an observer killed mid-capture leaves a partial capture (the metadata and the raw
rows ingested up to its last checkpoint) and a work directory holding everything the tracer
wrote (libbpf: binary record files; bpftrace: the text stream), which is a superset of the
ingested rows. Both are abandoned although most of the capture is there.
Approach: start a new capture; copy the partial capture's metadata tables (topology, /proc
snapshots) into it; take the raw event tables from the work directory's files when they exist
(decoded whole, up to the last complete record or line), else from the partial capture. The
capture row says `end_reason = 'recovered'`, ends at the last complete event, and its loss
accounting says what is unknown: no end-of-run kernel counters exist, so `tracer_counts` is
empty and `events_lost` holds only the switch-chain gaps finalize finds (a lower bound). The
leftovers are removed only after the new capture is in place.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from threadwise.errors import UsageError
from threadwise.observe import leftovers
from threadwise.observe.ingest import ingest_records
from threadwise.observe.records import FILES, RecordReader
from threadwise.observe.schema import RAW_TABLES
from threadwise.observe.store import EVENT_TABLES, SCHEMA_VERSION, CaptureMeta, CaptureWriter, has_table
from threadwise.observe.stream import StreamParser
from threadwise.procs import is_alive_and_ours
from threadwise.sqlfiles import identifier, statement

CAVEAT = ("recovered from an observe run that was killed: no end-of-run kernel counters exist, so "
          "events the tracer dropped are unknown; events_lost counts only the switch-chain gaps "
          "(a lower bound), and the capture ends at the last complete event")
# metadata tables copied from the partial capture (the capture row is rebuilt)
COPIED = ("cpu_topology", "proc_snapshot", "cpu_steal", "raw_lost")


@dataclass(frozen=True)
class Recovered:
    path: Path
    events: int
    source: str           # where the events came from
    removed: list[Path]


def _sql(name: str) -> str:
    return statement("threadwise.observe", "sql/capture.sql", name)


def _pair(path: Path) -> tuple[Path | None, Path | None, dict]:
    """(work directory, partial capture, owner record) that `path` names."""
    path = path.resolve()
    if path.is_dir():
        owner = leftovers.read_owner(path)
        if owner is None:
            raise UsageError(f"{path} is not an observe work directory (no {leftovers.OWNER_FILE})",
                             hint="give a threadwise-observe-* directory or a .NAME.tmp-PID-START file")
        partial = Path(owner["temp_capture"]) if owner.get("temp_capture") else None
        return path, partial if partial and partial.exists() else None, owner
    if path.name.endswith(".wal"):
        path = Path(str(path)[:-4])
    if not leftovers.TEMP_CAPTURE.match(path.name) or not (path.exists() or Path(f"{path}.wal").exists()):
        raise UsageError(f"{path} is not a partial capture of a killed run",
                         hint="run `threadwise clean --keep` to list what can be recovered")
    for workdir in leftovers.temp_root().glob(f"{leftovers.WORKDIR_PREFIX}*"):
        owner = leftovers.read_owner(workdir)
        if owner and owner.get("temp_capture") and Path(owner["temp_capture"]) == path:
            return workdir, path, owner
    return None, path, {}


def _event_source(workdir: Path | None) -> str | None:
    """What in the work directory holds the run's events, if anything."""
    if workdir is None:
        return None
    records = workdir / "records"
    if records.is_dir() and any((records / name).exists() for name in FILES):
        return f"the libbpf tracer's records in {records}"
    if (workdir / "stream.txt").exists():
        return f"the bpftrace stream {workdir / 'stream.txt'}"
    return None


def _append_events(workdir: Path, writer: CaptureWriter) -> None:
    """The work directory's events into `writer`, in bounded pieces, up to the last complete one."""
    records = workdir / "records"
    if records.is_dir():
        ingest_records(RecordReader(records), writer)
        return
    parser = StreamParser()
    with open(workdir / "stream.txt", encoding="utf-8", errors="replace") as f:
        while chunk := f.read(16 << 20):
            for name, table in parser.feed(chunk).tables.items():
                writer.append(name, table)
    # a last line without its newline may be cut short: it is never parsed (close() is not called)


def recover(path: Path, output: Path | None = None, *, force: bool = False,
            progress: Callable[[str], None] = print) -> Recovered:
    workdir, partial, owner = _pair(path)
    if output is None:
        if owner.get("output"):
            output = Path(owner["output"])
        elif partial is not None:
            match = leftovers.TEMP_CAPTURE.match(partial.name)
            assert match is not None
            output = partial.with_name(match["name"])
        else:
            raise UsageError("cannot tell which capture this run was writing", hint="give -o OUT.duckdb")
    _refuse_live(workdir, partial, owner)
    writer = CaptureWriter(output, force=force)
    scratch = Path(tempfile.mkdtemp(prefix="threadwise-recover-"))
    try:
        source = _event_source(workdir)
        if partial is not None:
            # copy (with its WAL) so opening it, which replays the WAL, never changes the leftover
            copy = scratch / "partial.duckdb"
            for src, dst in ((partial, copy), (Path(f"{partial}.wal"), Path(f"{copy}.wal"))):
                if src.exists():
                    shutil.copyfile(src, dst)
            _copy_tables(copy, writer, COPIED if source is not None else (*COPIED, *RAW_TABLES))
        if source is not None:
            assert workdir is not None
            _append_events(workdir, writer)
        else:
            source = "the partial capture"
        progress(f"recover: {sum(writer.rows[t] for t in EVENT_TABLES):,} events from {source}")
        events_total = _write_capture_row(writer, owner)
        final = writer.finalize()
    except BaseException:
        writer.abandon()
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.chmod(final, 0o644)
    removed = [item for leftover in (workdir, partial) if leftover is not None
               for item in leftovers.delete(leftover)]
    return Recovered(final, events_total, source, removed)


def _refuse_live(workdir: Path | None, partial: Path | None, owner: dict) -> None:
    """Never take a running observer's files."""
    if owner and is_alive_and_ours(int(owner["pid"]), int(owner["start"])):
        raise UsageError(f"{workdir} belongs to observe pid {owner['pid']}, which is still running",
                         hint="recover only what a killed run left (`threadwise clean --keep` lists it)")
    match = leftovers.TEMP_CAPTURE.match(partial.name) if partial is not None else None
    if match and match["start"] and is_alive_and_ours(int(match["pid"]), int(match["start"])):
        raise UsageError(f"{partial} belongs to observe pid {match['pid']}, which is still running",
                         hint="recover only what a killed run left (`threadwise clean --keep` lists it)")


def _copy_tables(source: Path, writer: CaptureWriter, tables: tuple[str, ...]) -> None:
    """Copy `tables` of the capture file `source` into the capture being written."""
    con = duckdb.connect(str(source))   # read-write: opening replays the killed run's WAL
    try:
        for table in tables:
            name = identifier(table, tables)
            if not has_table(con, table):
                continue   # a partial capture of an older schema (cpu_steal came in migration 5)
            batch = con.execute(f"SELECT * FROM {name}").to_arrow_table()
            if table in RAW_TABLES:
                writer.append(table, batch)
            else:
                writer.con.register("_copied", batch)
                try:
                    writer.con.execute(f"INSERT INTO {name} SELECT * FROM _copied")
                finally:
                    writer.con.unregister("_copied")
    finally:
        con.close()


def _write_capture_row(writer: CaptureWriter, owner: dict) -> int:
    first, last = writer.con.execute(_sql("event_span")).fetchall()[0]
    start_ts = int(owner.get("live_ts") or first or 0)
    end_ts = int(last or start_ts)
    start_wall = (dt.datetime.fromisoformat(owner["start_wall"]) if owner.get("start_wall")
                  else dt.datetime.now(dt.UTC).replace(tzinfo=None))
    events = sum(writer.rows[t] for t in EVENT_TABLES)
    writer.insert("capture", [CaptureMeta(
        capture_id=str(uuid.uuid4()), schema_version=SCHEMA_VERSION, host=socket.gethostname(),
        kernel_release=os.uname().release, start_wall=start_wall, start_ts=start_ts, end_ts=end_ts,
        duration_ns=end_ts - start_ts, target_kind=str(owner.get("target_kind", "unknown")),
        target_spec=str(owner.get("target_spec", "unknown")),
        target_tgids=[int(t) for t in owner.get("target_tgids", [])],
        tracer_backend=str(owner.get("backend", "unknown")),
        tracer_version=str(owner.get("tracer_version", "unknown")), events_recorded=events,
        events_lost=0, loss_detail="unknown: no end-of-run kernel counters (recovered)",
        end_reason="recovered", notes=CAVEAT)])
    return events
