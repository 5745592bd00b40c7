"""Store an Analysis in a file of its own beside the capture, under a versioned schema.

A capture stays as recorded: analyze only reads it (a profile's
`capture_sha256` keeps matching, and a capture written by root can be analyzed
by anyone who can read it). The derived tables go to an analysis file,
`NAME.analysis.duckdb` beside `NAME.duckdb` by default (`analysis_path`), or
wherever the caller says. Tables are named `analysis_*` and written as a whole
(an analysis is derived data: the latest run wins); `analysis_meta` carries
the analysis schema version and the capture's id, so a reader can tell what
it is looking at and whether it belongs to this capture. The file is written
under a temporary name in the same directory and renamed into place when
complete; frames go in through Arrow (no row-by-row inserts), then a
CHECKPOINT keeps the WAL empty (DESIGN.md: DuckDB WAL replay bugs).

No column is listed here: `analysis_meta` is `model.META_SCHEMA`, derived from
`contract.AnalysisRecord` (once, short_lived went unstored because this file
listed the columns by hand), and reading back fills the same fields by name;
a column an older analysis lacks loads as the field's default.

Captures analyzed by an older threadwise hold the tables inside the capture
itself; `load_analysis` still reads those when no analysis file exists.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl

from threadwise.analyze.contract import RECORD_FIELDS
from threadwise.analyze.model import ANALYSIS_SCHEMA_VERSION, META_SCHEMA, Analysis
from threadwise.errors import InputError, UsageError
from threadwise.observe.store import open_capture
from threadwise.sqlfiles import identifier, statement

TABLES = ("analysis_meta", "analysis_groups", "analysis_threads", "analysis_wake_edges",
          "analysis_chains", "analysis_preemptors")
SUFFIX = ".analysis.duckdb"


def _sql(name: str) -> str:
    return statement("threadwise.analyze", "store.sql", name)


def analysis_path(capture: str | Path) -> Path:
    """Where the analysis of `capture` is stored by default: `NAME.analysis.duckdb` beside it."""
    path = Path(capture)
    stem = path.stem if path.suffix == ".duckdb" else path.name
    return path.with_name(stem + SUFFIX)


def _meta(analysis: Analysis) -> pl.DataFrame:
    row = {"analysis_schema_version": ANALYSIS_SCHEMA_VERSION, "capture_id": analysis.capture_id,
           "analyzed_at": dt.datetime.now(dt.UTC).replace(tzinfo=None), **analysis.scalars()}
    return pl.DataFrame({name: [value] for name, value in row.items()}, schema=META_SCHEMA)


def analysis_target(capture: str | Path | None, output: str | Path | None = None) -> Path:
    """The analysis file to write (`output`, else `analysis_path(capture)`), refused early
    (UsageError) when it cannot be written."""
    if output is None and capture is None:
        raise UsageError("storing an analysis needs the capture's path or an output file")
    target = Path(output) if output is not None else analysis_path(capture or "")
    directory = target.parent
    if not directory.is_dir():
        raise UsageError(f"cannot store the analysis: {directory} is not a directory",
                         hint="give -o FILE in a directory that exists")
    if not os.access(directory, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"cannot store the analysis: {target} is not writable",
                         hint="give -o FILE somewhere you can write, or leave out --store: the "
                              "analysis is printed either way and the capture is never written")
    return target


def store_analysis(analysis: Analysis, path: str | Path | None = None, *,
                   output: str | Path | None = None) -> Path:
    """Write the analysis_* tables to `output` (default: `analysis_path` of the capture `path`,
    else of the analysis's own capture); returns the file written. The capture is never opened."""
    target = analysis_target(path or analysis.capture_path, output)
    frames = {
        "analysis_meta": _meta(analysis),
        "analysis_groups": analysis.groups,
        "analysis_threads": analysis.threads,
        "analysis_wake_edges": analysis.wake_edges,
        "analysis_chains": analysis.chains,
        "analysis_preemptors": analysis.preemptors,
    }
    partial = target.with_name(f".{target.name}.tmp")
    try:
        partial.unlink(missing_ok=True)
        con = duckdb.connect(str(partial))
        try:
            for table, frame in frames.items():
                con.register("_frame", frame.to_arrow())
                try:
                    con.execute(f"CREATE TABLE {identifier(table, TABLES)} AS SELECT * FROM _frame")
                finally:
                    con.unregister("_frame")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        partial.replace(target)
    except (OSError, duckdb.Error) as error:   # e.g. a directory root may not write (immutable)
        raise UsageError(f"cannot store the analysis in {target}: {str(error).splitlines()[0]}",
                         hint="give -o FILE somewhere you can write; the capture was not changed") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
            partial.with_name(partial.name + ".wal").unlink(missing_ok=True)
    return target


@contextlib.contextmanager
def _open(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as error:
        raise InputError(f"{path} is not an analysis file: {str(error).splitlines()[0]}",
                         hint="remove it and re-run `threadwise analyze CAPTURE --store`") from None
    try:
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def _source(capture: Path, analysis_file: Path | None) -> Iterator[duckdb.DuckDBPyConnection | None]:
    """A read-only connection to where the analysis of `capture` lives: its analysis file, else
    (stored by an older threadwise) the capture itself; None when neither holds one."""
    file = analysis_file or analysis_path(capture)
    if file.is_file():
        with _open(file) as con:
            yield con
        return
    if analysis_file is not None:
        raise UsageError(f"analysis file {file} not found",
                         hint=f"write it with `threadwise analyze {capture} --store -o {file}`")
    with open_capture(capture) as con:
        found = con.execute(_sql("has_analysis")).fetchall()
        yield con if found and found[0][0] else None


def _version(con: duckdb.DuckDBPyConnection) -> int | None:
    found = con.execute(_sql("has_analysis")).fetchall()
    if not found or not found[0][0]:
        return None
    row = con.execute(_sql("stored_version")).fetchall()
    return int(row[0][0]) if row and row[0][0] is not None else None


def stored_version(path: str | Path, *, analysis_file: str | Path | None = None) -> int | None:
    """The analysis schema version stored for the capture `path`, or None if never stored."""
    with _source(Path(path), Path(analysis_file) if analysis_file else None) as con:
        return None if con is None else _version(con)


def load_analysis(path: str | Path, *, analysis_file: str | Path | None = None) -> Analysis | None:
    """The analysis stored for the capture `path` (no recomputation), or None if there is none.

    Reads `analysis_file` (default: `analysis_path(path)`), else tables an older threadwise
    stored inside the capture. Raises InputError when the stored analysis has a schema version
    this threadwise does not know, or belongs to another capture (re-run `threadwise analyze`).
    """
    capture = Path(path)
    with _source(capture, Path(analysis_file) if analysis_file else None) as con:
        if con is None:
            return None
        version = _version(con)
        if version is None:
            return None
        if version != ANALYSIS_SCHEMA_VERSION:
            raise InputError(f"{path}: its stored analysis has schema {version}, this threadwise reads "
                             f"{ANALYSIS_SCHEMA_VERSION}", hint=f"re-run `threadwise analyze {path} --store`")

        def table(name: str) -> pl.DataFrame:
            table = con.execute(f"SELECT * FROM {identifier(name, TABLES)}").to_arrow_table()
            return pl.DataFrame(pl.from_arrow(table))

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
            meta = table("analysis_meta").row(0, named=True)
            frames = {name: table(name) for name in TABLES[1:]}
    with open_capture(capture) as con:
        capture_id = con.execute(_sql("capture_id")).fetchall()[0][0]
    if meta["capture_id"] != capture_id:
        raise InputError(f"the stored analysis {analysis_file or analysis_path(capture)} belongs to another "
                         f"capture (id {meta['capture_id']}, not {capture}'s {capture_id})",
                         hint=f"re-run `threadwise analyze {capture} --store` to replace it")
    # a column an older analysis lacks (or a null) leaves the field's default
    scalars = {name: meta[name] for name in RECORD_FIELDS if meta.get(name) is not None}
    return Analysis(
        groups=frames["analysis_groups"], threads=frames["analysis_threads"],
        wake_edges=frames["analysis_wake_edges"], chains=frames["analysis_chains"],
        preemptors=frames["analysis_preemptors"], capture_id=meta["capture_id"], capture_path=capture,
        **scalars)
