"""A fleet's captures, from whatever the user names: files, directories, globs, Parquet trees.

Problem: a fleet's captures arrive as DuckDB files (one per `observe`), as a hive-partitioned
Parquet tree (`observe --parquet`, `export --format parquet`), or both; the engines read one
Parquet tree, and the per-capture analysis reads one DuckDB file per capture.

Approach: every argument is expanded (a glob, a directory searched for `capture.parquet`
partitions and then for `.duckdb` captures, or a file) into captures, each named by its
partition, `host=H/capture=C`. When they all sit in one Parquet tree the engines read it in
place; otherwise a private staging tree holds them all: DuckDB captures exported into it,
Parquet partitions hard-linked (copied across file systems). A Parquet capture is imported
into a DuckDB file when its analysis asks for one. The same capture named twice (its id is a
random uuid) counts once.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from threadwise.errors import InputError, UsageError
from threadwise.observe.interop.parquet import export_parquet, import_parquet

CAPTURE_FILE = "capture.parquet"   # every exported capture has its `capture` table


@dataclass(frozen=True)
class FleetCapture:
    """One capture of the fleet: its partition in the tree the engines read, and a DuckDB file."""

    host: str        # the partition's host (as written: characters outside A-Za-z0-9._- are _)
    capture: str     # the partition's capture id
    partition: Path  # ROOT/host=H/capture=C
    duckdb: Path     # the capture as a DuckDB file: the original, or where its Parquet is imported to
    imported: bool   # True: `duckdb` is made from the Parquet when first asked for (capture_file)

    def capture_file(self) -> Path:
        """The capture as a DuckDB file (what analyze_capture reads), imported once when needed."""
        if self.imported and not self.duckdb.exists():
            import_parquet(self.partition, self.duckdb)
        return self.duckdb


@dataclass(frozen=True)
class Fleet:
    root: Path                     # the Parquet tree both engines read
    captures: list[FleetCapture]   # ordered by host, then capture

    @property
    def hosts(self) -> list[str]:
        return sorted({c.host for c in self.captures})


def _expand(argument: str) -> list[Path]:
    if glob.has_magic(argument):
        found = sorted(Path(p) for p in glob.glob(argument, recursive=True))
        if not found:
            raise UsageError(f"{argument}: the glob matches nothing", hint="check the pattern's quoting")
        return found
    path = Path(argument)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory", hint="give capture files, a directory "
                         "or a Parquet tree written by `threadwise export --format parquet`")
    return [path]


def _captures_in(path: Path) -> tuple[list[Path], list[Path]]:
    """(Parquet partitions, DuckDB files) that `path` holds or is."""
    if path.is_file():
        return ([path.parent], []) if path.suffix == ".parquet" else ([], [path])
    partitions = sorted(p.parent for p in path.rglob(CAPTURE_FILE))
    if partitions:
        return partitions, []
    files = sorted(p for p in path.rglob("*.duckdb") if not p.name.endswith(".analysis.duckdb"))
    return [], files


def _partition_key(directory: Path) -> tuple[str, str]:
    host, capture = directory.parent.name, directory.name
    if not (host.startswith("host=") and capture.startswith("capture=")):
        raise InputError(f"{directory}: not a capture partition (host=H/capture=C)",
                         hint="give the tree `threadwise export --format parquet` writes")
    return host.removeprefix("host="), capture.removeprefix("capture=")


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link (or copy, across file systems) one partition's files into the staging tree."""
    target.mkdir(parents=True, exist_ok=True)
    for file in source.glob("*.parquet"):
        try:
            os.link(file, target / file.name)
        except OSError:
            shutil.copy2(file, target / file.name)


@contextmanager
def open_fleet(arguments: list[str]) -> Iterator[Fleet]:
    """The fleet the arguments name (staging removed on exit); refuses fewer than one capture."""
    partitions: list[Path] = []
    files: list[Path] = []
    for argument in arguments:
        for path in _expand(argument):
            found, duck = _captures_in(path)
            partitions += found
            files += duck
    if not partitions and not files:
        raise UsageError(f"no captures in {' '.join(arguments)}",
                         hint="give .duckdb captures, or a tree of host=H/capture=C/*.parquet")
    with TemporaryDirectory(prefix="threadwise-fleet-") as scratch:
        staging = Path(scratch) / "tree"
        roots = {p.parent.parent.resolve() for p in partitions}
        root = roots.pop() if len(roots) == 1 and not files else staging
        seen: dict[str, FleetCapture] = {}   # by capture id: a random uuid, whatever the host
        for directory in dict.fromkeys(p.resolve() for p in partitions):
            host, capture = _partition_key(directory)
            partition = root / f"host={host}" / f"capture={capture}"
            if capture in seen:
                continue
            if root == staging:
                _link_tree(directory, partition)
            seen[capture] = FleetCapture(host, capture, partition,
                                         Path(scratch) / f"{host}-{capture}.duckdb", imported=True)
        for file in dict.fromkeys(f.resolve() for f in files):
            written = export_parquet(file, staging, force=True)
            host, capture = _partition_key(written.directory)
            if capture in seen:   # named twice: keep the first, drop this copy from the tree
                if written.directory != seen[capture].partition:
                    shutil.rmtree(written.directory)
                continue
            seen[capture] = FleetCapture(host, capture, written.directory, file, imported=False)
        yield Fleet(root, sorted(seen.values(), key=lambda c: (c.host, c.capture)))
