"""Files a killed `observe` left behind: find them, tell them from a live run's, remove them.

Problem: an observer killed with SIGKILL cannot clean up. It leaves a partial capture beside
the requested output (`.NAME.tmp-PID-START` and its `.wal`) and a work directory in the temp
directory (`threadwise-observe-*`, holding the tracer's raw records or text stream). Nothing
else ever removes them, and a careless cleaner could delete a live run's files or someone
else's.
Approach: every such file names or records its owner as (pid, start time): the partial
capture in its name, the work directory in `owner.json`, written before anything else goes
in. A file is a leftover only when that owner is not running (a reused pid has another start
time). Only our naming is ever matched, and a work directory without an owner record is never
touched. `find` reports (path, size, age); `remove` deletes; `observe --recover` (recover.py)
rebuilds a capture from them first when the data is worth keeping.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from threadwise.procs import is_alive_and_ours, proc_start_time

WORKDIR_PREFIX = "threadwise-observe-"
OWNER_FILE = "owner.json"
TEMP_CAPTURE = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)(?:-(?P<start>\d+))?(?:\.wal)?$")


@dataclass(frozen=True)
class Leftover:
    """A dead run's partial capture (with its .wal) or work directory."""

    path: Path
    kind: str                 # "partial capture" | "work directory"
    size: int                 # bytes, the .wal included
    age_s: float
    owner_pid: int
    output: Path | None = None   # the capture the run was writing (work directories know it)

    def describe(self) -> str:
        return (f"{self.path}  {self.kind}, {_human(self.size)}, {_age(self.age_s)} old, "
                f"owner pid {self.owner_pid} is gone")


def _human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def temp_capture_path(final: Path, pid: int, start: int) -> Path:
    """Where a run (pid, start) writes `final` until it is complete."""
    return final.with_name(f".{final.name}.tmp-{pid}-{start}")


def temp_root() -> Path:
    return Path(tempfile.gettempdir())


def write_owner(workdir: Path, fields: dict[str, Any]) -> None:
    """Record (or update) who owns `workdir`; replaced atomically."""
    path = workdir / OWNER_FILE
    current = read_owner(workdir) or {}
    current.update(fields)
    scratch = workdir / f".{OWNER_FILE}.tmp"
    scratch.write_text(json.dumps(current, indent=1, default=str))
    scratch.replace(path)


def read_owner(workdir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((workdir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "pid" in data and "start" in data else None


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return sum(p.stat().st_size for p in (path, Path(f"{path}.wal")) if p.exists())


def _owner_dead(pid: int, start: int | None) -> bool:
    if start is None:      # an older name without the start time: dead only if the pid is unused
        return proc_start_time(pid) is None
    return not is_alive_and_ours(pid, start)


def _temp_capture(path: Path, now: float) -> Leftover | None:
    match = TEMP_CAPTURE.match(path.name)
    if match is None or (path.name.endswith(".wal") and Path(str(path)[:-4]).exists()):
        return None
    base = Path(str(path)[:-4]) if path.name.endswith(".wal") else path
    pid, start = int(match["pid"]), int(match["start"]) if match["start"] else None
    if not _owner_dead(pid, start):
        return None
    stat = path.stat()
    return Leftover(base, "partial capture", _size(base), now - stat.st_mtime, pid,
                    base.with_name(match["name"]))


def _workdir(path: Path, now: float) -> Leftover | None:
    owner = read_owner(path)
    if owner is None or not _owner_dead(int(owner["pid"]), int(owner["start"])):
        return None
    output = Path(owner["output"]) if owner.get("output") else None
    return Leftover(path, "work directory", _size(path), now - path.stat().st_mtime, int(owner["pid"]),
                    output)


def find(dirs: list[Path] | None = None) -> list[Leftover]:
    """Leftovers of dead runs in `dirs` (default: the current directory) and the temp directory,
    plus the partial captures that dead work directories name wherever they are."""
    now = time.time()
    found: dict[Path, Leftover] = {}
    for directory in [*(dirs or [Path.cwd()])]:
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            if entry.name.startswith(".") and ".tmp-" in entry.name and entry.is_file():
                leftover = _temp_capture(entry, now)
                if leftover:
                    found.setdefault(leftover.path, leftover)
    for entry in temp_root().glob(f"{WORKDIR_PREFIX}*"):
        if not entry.is_dir():
            continue
        leftover = _workdir(entry, now)
        if leftover is None:
            continue
        found.setdefault(entry, leftover)
        owner = read_owner(entry) or {}
        partial = Path(owner["temp_capture"]) if owner.get("temp_capture") else None
        if partial is not None and partial.exists():
            extra = _temp_capture(partial, now)
            if extra:
                found.setdefault(extra.path, extra)
    return sorted(found.values(), key=lambda leftover: str(leftover.path))


def delete(path: Path) -> list[Path]:
    """Remove a work directory, or a partial capture with its .wal; the paths removed."""
    removed = [path] if path.is_dir() else [p for p in (path, Path(f"{path}.wal")) if p.exists()]
    for item in removed:
        if item.is_dir():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)
    return removed


def remove(leftover: Leftover) -> None:
    delete(leftover.path)


def hint(leftovers: list[Leftover]) -> str:
    total = sum(leftover.size for leftover in leftovers)
    return (f"{len(leftovers)} leftover(s) of killed observe runs ({_human(total)}): "
            f"`threadwise clean` lists and removes them; `threadwise observe --recover PATH` "
            f"rebuilds a capture from one first")
