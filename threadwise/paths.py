"""Where threadwise keeps things, what kind a file is, and how it writes its outputs.

- `cache_dir`: caches outside the repository (keyed by version).
- `find_program`: an external tool, admin directories included.
- `file_kind` / `duckdb_kind`: what a path holds, sniffed from its first bytes,
  so a wrong file kind is named ("this is a capture") instead of surfacing as a
  parser's error about bytes.
- `write_output`: every file a command writes for the user goes through it:
  an existing file is replaced only with `--force`, and the text lands in a
  temporary file in the same directory first, renamed into place
  (`os.replace`) once complete, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from threadwise.errors import InputError, UsageError

# A DuckDB database file: an 8-byte checksum, then the magic "DUCK".
DUCKDB_MAGIC = b"DUCK"
DUCKDB_MAGIC_OFFSET = 8

FileKind = Literal["missing", "directory", "duckdb", "empty", "text", "binary", "unreadable"]


def cache_dir() -> Path:
    """~/.cache/threadwise (or $THREADWISE_CACHE), created on demand."""
    root = os.environ.get("THREADWISE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "threadwise"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's content, read in 1 MiB blocks (captures can be GBs)."""
    with Path(path).open("rb") as data:
        return hashlib.file_digest(data, "sha256").hexdigest()


def find_program(name: str) -> str | None:
    """`name` on PATH, else in /usr/sbin or /sbin, where Debian puts admin tools (bpftool)
    that a non-login root shell's PATH may lack; None when it is nowhere."""
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin", name), Path("/sbin", name)) if p.is_file()), None)


def file_kind(path: str | Path) -> FileKind:
    """What `path` holds, from its first bytes (never more than 4 KiB read)."""
    file = Path(path)
    if file.is_dir():
        return "directory"
    if not file.exists():
        return "missing"
    try:
        with file.open("rb") as raw:
            head = raw.read(4096)
    except OSError:
        return "unreadable"
    if not head:
        return "empty"
    if head[DUCKDB_MAGIC_OFFSET:DUCKDB_MAGIC_OFFSET + len(DUCKDB_MAGIC)] == DUCKDB_MAGIC:
        return "duckdb"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as bad:
        # a multi-byte character cut at the 4 KiB boundary is still text
        if bad.start < len(head) - 4:
            return "binary"
    return "text" if b"\0" not in head else "binary"


def duckdb_kind(path: str | Path) -> str:
    """Which threadwise DuckDB file `path` is: "a capture", "a ladder file" or "a DuckDB file"."""
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return "a DuckDB file"
    try:
        for table, kind in (("capture", "a capture"), ("ladder_meta", "a ladder file")):
            try:
                con.table(table)
            except duckdb.Error:
                continue
            return kind
        return "a DuckDB file"
    finally:
        con.close()


def require_text(path: str | Path, wanted: str) -> None:
    """Raise InputError naming the file's kind when `path` holds no text (a capture, a binary).

    `wanted` names what the command takes, e.g. "a profile (TOML)".
    """
    kind = file_kind(path)
    if kind == "duckdb":
        raise InputError(f"{path}: this is {duckdb_kind(path)}; "
                         f"{_command()} takes {wanted}",
                         hint="captures go to show, analyze, synthesize and lint --capture")
    if kind == "binary":
        raise InputError(f"{path}: this is a binary file, not text; {_command()} takes {wanted}",
                         hint="check the path; the file should be text")


def _command() -> str:
    """The running subcommand's name ("validate", "workload check"), for messages."""
    try:  # typer >= 0.22 carries its own click; older ones use click's
        from typer._click.globals import get_current_context
    except ImportError:
        try:
            from click import get_current_context
        except ImportError:
            return "this command"
    ctx = get_current_context(silent=True)
    if ctx is None:
        return "this command"
    return ctx.command_path.partition(" ")[2] or ctx.command_path


def check_new_output(path: str | Path, *, force: bool, option: str = "--output") -> Path:
    """Refuse to replace an existing `path` unless `force`; a directory is never replaced."""
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{file} is a directory", hint=f"give {option} a file name")
    if file.exists() and not force:
        raise UsageError(f"{file} already exists; not replaced",
                         hint=f"choose another {option}, or pass --force to replace it")
    return file


def write_output(path: str | Path, data: str | bytes, *, force: bool, option: str = "--output") -> Path:
    """Write `data` to `path` atomically (temp file in the same directory, then os.replace).

    An existing file is replaced only with `force`; the parent directory is created.
    """
    file = check_new_output(path, force=force, option=option)
    file.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, temp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o644 & ~_umask())
        os.replace(temp, file)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return file


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
