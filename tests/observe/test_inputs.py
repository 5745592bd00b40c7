"""Bad input to `threadwise observe` / `show`: clear message, non-zero exit, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unprivileged import UserPython
from threadwise import givenclock
from threadwise.durations import parse_duration
from threadwise.errors import TargetError, UsageError
from threadwise.observe import procfs
from threadwise.observe.backend import TaskActivity
from threadwise.observe.target import Target

THREADWISE = [sys.executable, "-m", "threadwise.cli"]


def run_cli(*args: str, env: dict[str, str] | None = None, user: UserPython | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess; with `user`, as that user (the `nobody_python` fixture)."""
    command = [*THREADWISE, *args] if user is None else user.command(*args)
    if user is not None:
        env = user.environ(env)
    return givenclock.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
                          check=False)


@pytest.mark.parametrize(("text", "seconds"), [("10", 10.0), ("10s", 10.0), ("500ms", 0.5),
                                               ("2m", 120.0), (" 1.5s ", 1.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "-5s", "0", "10ms", "2d", "25h", "1e9"])
def test_nonsensical_durations(text):
    with pytest.raises(UsageError):
        parse_duration(text)


def test_unknown_pid():
    with pytest.raises(TargetError, match="no process with pid"):
        Target.from_options(pid=2**22 + 12345, comm=None, cgroup=None, command=None)


def test_unknown_name_and_too_long_name():
    with pytest.raises(TargetError, match="no running process is named"):
        Target.from_options(pid=None, comm="no-such-proc-x", cgroup=None, command=None)
    with pytest.raises(UsageError, match="longer than 15"):
        Target.from_options(pid=None, comm="a-very-long-process-name", cgroup=None, command=None)


def test_unknown_cgroup():
    with pytest.raises(TargetError, match="no cgroup"):
        Target.from_options(pid=None, comm=None, cgroup="/no/such/group", command=None)


def test_exactly_one_target():
    with pytest.raises(UsageError, match="exactly one target"):
        Target.from_options(pid=None, comm=None, cgroup=None, command=None)
    with pytest.raises(UsageError, match="got --pid, --comm"):
        Target.from_options(pid=1, comm="x", cgroup=None, command=None)


def test_cli_bad_duration_exit_code_and_message(tmp_path):
    result = run_cli("observe", "--pid", str(os.getpid()), "-d", "soon", "-o", str(tmp_path / "c.duckdb"))
    assert result.returncode == 2
    assert "cannot read duration 'soon'" in result.stderr and "hint:" in result.stderr
    assert not list(tmp_path.iterdir())


def test_cli_unknown_pid(tmp_path):
    result = run_cli("observe", "--pid", "4999999", "-d", "1s", "-o", str(tmp_path / "c.duckdb"))
    assert result.returncode == 3
    assert "no process with pid 4999999" in result.stderr
    assert not list(tmp_path.iterdir())


def test_cli_existing_output_needs_force(tmp_path):
    existing = tmp_path / "c.duckdb"
    existing.write_text("precious")
    result = run_cli("observe", "--pid", str(os.getpid()), "-d", "1s", "-o", str(existing))
    assert result.returncode == 2
    assert "already exists" in result.stderr and "--force" in result.stderr
    assert existing.read_text() == "precious"


def test_cli_unwritable_output_directory(tmp_path):
    result = run_cli("observe", "--pid", str(os.getpid()), "-d", "1s", "-o", "/proc/c.duckdb")
    assert result.returncode == 2
    assert "not writable" in result.stderr


def test_cli_missing_bpftrace(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = dict(os.environ, PATH=str(bin_dir))
    result = run_cli("observe", "--backend", "bpftrace", "--pid", str(os.getpid()), "-d", "1s",
                     "-o", str(tmp_path / "c.duckdb"), env=env)
    assert result.returncode == 5
    assert "bpftrace is not installed" in result.stderr and "setup-system.sh" in result.stderr


def test_cli_falls_back_from_an_unbuilt_libbpf_tracer_and_says_so(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # no tracer in this cache, and no bpftrace on PATH: both are named, with what to do
    env = dict(os.environ, PATH=str(bin_dir), THREADWISE_CACHE=str(tmp_path / "empty-cache"))
    result = run_cli("observe", "--pid", str(os.getpid()), "-d", "1s", "-o", str(tmp_path / "c.duckdb"),
                     env=env)
    assert result.returncode == 5
    assert "libbpf tracer is not built" in result.stderr and "using bpftrace instead" in result.stderr
    assert "bpftrace is not installed" in result.stderr


def test_cli_not_root(tmp_path, nobody_python):
    tmp_path.chmod(0o777)
    result = run_cli("observe", "--pid", str(os.getpid()), "-d", "1s", "-o", str(tmp_path / "c.duckdb"),
                     user=nobody_python, cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    assert "needs root" in result.stderr and "CAP_BPF" in result.stderr


def test_cli_show_missing_and_bad_files(tmp_path):
    result = run_cli("show", str(tmp_path / "nope.duckdb"))
    assert result.returncode == 2 and "not found" in result.stderr
    junk = tmp_path / "junk.duckdb"
    junk.write_text("junk")
    result = run_cli("show", str(junk))
    assert result.returncode == 2 and "not a threadwise capture (it is not a DuckDB file)" in result.stderr
    assert "Traceback" not in result.stderr


def test_which_task_activity_can_grow_a_target():
    launched = Target("command", "app", command=["app"], pid=100, tgids={100, 101})
    assert launched.may_have_grown(TaskActivity(parent_tgids={101}))        # its child or thread
    assert not launched.may_have_grown(TaskActivity(parent_tgids={7}, comms={"app"}))
    named = Target("comm", "worker", comm="worker", tgids={200})
    assert named.may_have_grown(TaskActivity(comms={"worker"}))             # born or renamed so
    assert named.may_have_grown(TaskActivity(parent_tgids={200}))           # a new thread
    assert not named.may_have_grown(TaskActivity(parent_tgids={7}, comms={"other"}))
    # processes are moved into a cgroup without any task event
    assert Target("cgroup", "/x", cgroup="/x").may_have_grown(TaskActivity())


def test_a_process_snapshot_skips_known_threads_before_reading_them():
    mine = procfs.snapshot_process(os.getpid())
    assert mine and {snap.tid for snap in mine} == set(procfs.thread_ids(os.getpid()))
    assert procfs.snapshot_process(os.getpid(), skip={snap.tid for snap in mine}) == []
