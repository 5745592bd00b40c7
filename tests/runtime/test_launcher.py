"""status / stop / refusals against a fake /sys/kernel/sched_ext (fast tier)."""

from __future__ import annotations

import os

import pytest

from threadwise.errors import UsageError
from threadwise.runtime import launcher, scx
from threadwise.runtime.exitinfo import ExitReport
from threadwise.runtime.state import Phase, RunFiles, RunState, read_state, write_state


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    root = tmp_path / "sched_ext"
    (root / "root").mkdir(parents=True)
    monkeypatch.setattr(scx, "SCHED_EXT", root)
    monkeypatch.setattr(launcher, "DISABLE_WAIT_S", 0.2)

    def set_state(state: str, ops: str = "") -> None:
        (root / "state").write_text(state + "\n")
        (root / "root" / "ops").write_text(ops)

    set_state("disabled")
    return set_state


@pytest.fixture
def files(tmp_path):
    run = RunFiles(tmp_path / "run")
    run.root.mkdir()
    return run


def test_status_without_a_run(sysfs, files):
    result = launcher.status(files, interval_s=0)
    assert result.applied is None and result.problem is None
    assert result.sched_ext.state == "disabled"


def test_status_reports_a_failed_run(sysfs, files):
    write_state(files, RunState(Phase.FAILED, exit=ExitReport("killed", "by SIGKILL", -9, True)))
    assert launcher.status(files, interval_s=0).problem == "killed: by SIGKILL"


def test_stop_after_the_supervisor_vanished_records_it(sysfs, files):
    write_state(files, RunState(Phase.ATTACHED, supervisor_pid=os.getpid(), supervisor_start=-1))
    result = launcher.stop(files)
    assert result.stopped and result.state_after == "disabled"
    assert read_state(files).exit.kind == "supervisor_lost"


def test_stop_leaves_a_foreign_scheduler_alone(sysfs, files):
    sysfs("enabled", "rusty_1.0")
    with pytest.raises(UsageError, match="did not start it"):
        launcher.stop(files)


def test_nothing_to_stop(sysfs, files):
    assert launcher.stop(files).stopped is False


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal after the root check needs root")
def test_apply_refuses_when_another_scheduler_is_attached(sysfs, files, tmp_path):
    from threadwise.shape import synthetic
    from threadwise.synthesize.compile import compile_profile
    from threadwise.synthesize.example import example_profile

    config = tmp_path / "any.json"   # a valid config: bad input is reported before the host's state
    config.write_text(compile_profile(example_profile("any"), synthetic(4, 1, 1)).to_json())
    sysfs("enabled", "rusty_1.0")
    with pytest.raises(UsageError, match="another sched_ext scheduler"):
        launcher.prepare(config, None, files)
