"""`clean` judges files by their owner: a dead run's go, a live run's and foreign files stay."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from threadwise.observe import leftovers
from threadwise.procs import me, proc_start_time


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(leftovers, "temp_root", lambda: root)
    return root


def _dead_pid() -> tuple[int, int]:
    """(pid, start time) of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    start = proc_start_time(proc.pid)
    assert start is not None
    proc.wait()
    return proc.pid, start


def _clean(*args: str, cwd, temp) -> subprocess.CompletedProcess[str]:
    """The real CLI, with its temp directory (where work directories live) set to `temp`."""
    return subprocess.run([sys.executable, "-m", "threadwise.cli", "clean", *args], cwd=cwd,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "TMPDIR": str(temp)})


def test_a_dead_runs_files_are_found_and_removed(tmp_path, temp_root):
    pid, start = _dead_pid()
    partial = leftovers.temp_capture_path(tmp_path / "run.duckdb", pid, start)
    partial.write_bytes(b"x" * 1000)
    partial.with_name(partial.name + ".wal").write_bytes(b"y" * 10)
    work = temp_root / f"{leftovers.WORKDIR_PREFIX}abc"
    work.mkdir()
    (work / "records").mkdir()
    (work / "records" / "switch.bin").write_bytes(b"z" * 400)
    leftovers.write_owner(work, {"pid": pid, "start": start, "output": str(tmp_path / "run.duckdb"),
                                 "temp_capture": str(partial)})
    found = leftovers.find([tmp_path])
    assert {x.kind for x in found} == {"partial capture", "work directory"}
    assert next(x for x in found if x.kind == "partial capture").size == 1010
    assert all(f"owner pid {pid} is gone" in x.describe() for x in found)
    for leftover in found:
        leftovers.remove(leftover)
    assert not work.exists() and list(tmp_path.glob(".run.duckdb*")) == []


def test_a_live_runs_files_survive(tmp_path, temp_root):
    pid, start = me()   # this test process plays the live observer
    partial = leftovers.temp_capture_path(tmp_path / "live.duckdb", pid, start)
    partial.write_bytes(b"x")
    work = temp_root / f"{leftovers.WORKDIR_PREFIX}live"
    work.mkdir()
    leftovers.write_owner(work, {"pid": pid, "start": start, "temp_capture": str(partial)})
    assert leftovers.find([tmp_path]) == []


def test_a_reused_pid_does_not_make_a_dead_run_look_alive(tmp_path, temp_root):
    pid, start = me()
    partial = leftovers.temp_capture_path(tmp_path / "old.duckdb", pid, start - 1)  # same pid, other start
    partial.write_bytes(b"x")
    assert [x.path for x in leftovers.find([tmp_path])] == [partial]


def test_files_threadwise_did_not_make_survive_a_clean(tmp_path, temp_root):
    pid, start = _dead_pid()
    foreign = [tmp_path / "notes.txt", tmp_path / ".hidden.tmp", tmp_path / ".x.duckdb.tmpfile",
               tmp_path / "capture.duckdb"]
    for path in foreign:
        path.write_text("keep me")
    unowned = temp_root / f"{leftovers.WORKDIR_PREFIX}noowner"   # our prefix, no owner record
    unowned.mkdir()
    (unowned / "stream.txt").write_text("data")
    other = temp_root / "someone-else"
    other.mkdir()
    leftovers.write_owner(other, {"pid": pid, "start": start})   # dead owner, but not our name
    done = _clean(str(tmp_path), cwd=tmp_path, temp=temp_root)
    assert done.returncode == 0, done.stderr
    assert "no leftovers" in done.stdout
    assert all(path.exists() for path in foreign) and unowned.exists() and other.exists()


def test_clean_keep_lists_without_removing(tmp_path, temp_root):
    pid, start = _dead_pid()
    partial = leftovers.temp_capture_path(tmp_path / "k.duckdb", pid, start)
    partial.write_bytes(b"x" * 2048)
    done = _clean("--keep", str(tmp_path), cwd=tmp_path, temp=temp_root)
    assert done.returncode == 0 and "keep" in done.stdout and str(partial) in done.stdout
    assert partial.exists()
    done = _clean(str(tmp_path), cwd=tmp_path, temp=temp_root)
    assert "remove" in done.stdout and not partial.exists()


def test_my_own_identity_is_stable():
    assert me() == (os.getpid(), proc_start_time(os.getpid()))
