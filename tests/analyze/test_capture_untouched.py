"""analyze only reads a capture: its bytes (and a profile's capture_sha256) hold, a read-only
capture is analyzed, and a stored analysis lives in a file of its own beside it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.analyze import analyze_capture
from threadwise.analyze.store import analysis_path, load_analysis, store_analysis, stored_version
from threadwise.errors import InputError
from threadwise.observe.builder import CaptureBuilder

MS = 1_000_000
T0 = 1_000_000_000


def tw(*args: str) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def capture(directory: Path, name: str = "cap.duckdb") -> Path:
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "hot-0")
    cap.slice(101, 0, T0, 999 * MS, "R+")
    cap.thread(102, 100, "worker-1")
    cap.periodic(102, 1, first_ts=T0 + MS, run_ns=100_000, period_ns=10 * MS, count=50, waker=100,
                 latency_ns=5_000)
    return cap.write(directory / name)


def _chattr(flag: str, *paths: Path) -> bool:
    chattr = shutil.which("chattr")
    return chattr is not None and subprocess.run([chattr, flag, *map(str, paths)], capture_output=True,
                                                 check=False).returncode == 0


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` and its directory made unwritable, for root too: immutable (chattr +i) where root
    runs the test and the file system allows it, else plain permissions (which bind non-root)."""
    directory = path.parent
    immutable = os.geteuid() == 0 and _chattr("+i", path, directory)
    if not immutable:
        if os.geteuid() == 0:
            pytest.skip("root ignores file modes and chattr +i is unavailable here")
        path.chmod(0o444)
        directory.chmod(0o555)
    try:
        yield
    finally:
        if immutable:
            _chattr("-i", path, directory)
        directory.chmod(0o755)
        path.chmod(0o644)


def test_analyze_leaves_the_capture_byte_for_byte_and_writes_nothing_by_default(tmp_path: Path) -> None:
    path = capture(tmp_path)
    before, listing = sha256(path), sorted(p.name for p in tmp_path.iterdir())
    done = tw("analyze", str(path))
    assert done.returncode == 0, done.stderr
    assert "groups and roles" in done.stdout
    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing   # no analysis file, no WAL
    assert load_analysis(path) is None and stored_version(path) is None


def test_store_writes_the_analysis_beside_the_capture_which_keeps_its_hash(tmp_path: Path) -> None:
    path = capture(tmp_path)
    before = sha256(path)
    done = tw("analyze", str(path), "--store")
    assert done.returncode == 0, done.stderr
    beside = tmp_path / "cap.analysis.duckdb"
    assert analysis_path(path) == beside and beside.is_file()
    assert f"analysis stored in {beside}" in done.stderr
    assert sha256(path) == before
    stored = load_analysis(path)
    assert stored is not None and stored_version(path) == 1
    assert stored.groups.equals(analyze_capture(path).groups)
    assert sha256(path) == before


def test_a_read_only_capture_is_analyzed_and_the_store_goes_elsewhere(tmp_path: Path) -> None:
    directory = tmp_path / "root-written"
    directory.mkdir()
    path = capture(directory)
    before = sha256(path)
    elsewhere = tmp_path / "mine.analysis.duckdb"
    with read_only(path):
        done = tw("analyze", str(path))
        assert done.returncode == 0, done.stderr
        assert "groups and roles" in done.stdout
        refused = tw("analyze", str(path), "--store")   # beside it is not writable either
        assert refused.returncode == 2, refused.stderr
        assert "cannot store the analysis" in refused.stderr and "-o FILE" in refused.stderr
        assert "Traceback" not in refused.stderr
        done = tw("analyze", str(path), "-o", str(elsewhere))
        assert done.returncode == 0, done.stderr
        assert load_analysis(path, analysis_file=elsewhere) is not None
        assert sha256(path) == before
    assert sorted(p.name for p in directory.iterdir()) == ["cap.duckdb"]


def test_a_stored_analysis_of_another_capture_is_refused(tmp_path: Path) -> None:
    first, second = capture(tmp_path, "a.duckdb"), capture(tmp_path, "b.duckdb")
    store_analysis(analyze_capture(first), output=analysis_path(second))
    with pytest.raises(InputError, match="belongs to another capture"):
        load_analysis(second)
