"""The supervisor against a fake scx_layered and a fake /sys/kernel/sched_ext (fast tier).

The fake plays the kernel too: it writes `enabled` + ops when "attached" and
`disabled` when it unregisters on SIGINT. For kill -9 the test plays the
kernel (a real kernel detaches a dead scheduler by itself).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from threadwise.runtime import scx
from threadwise.runtime.state import RunFiles, read_state
from threadwise.runtime.supervisor import Supervisor

FAKE = """#!/bin/bash
root={root}
{body}
"""
ATTACHING = """
trap 'echo "EXIT: unregistered from user space"; echo disabled > $root/state; : > $root/root/ops; exit 0' INT
echo "INFO loading $1"
sleep 0.2
echo layered_fake > $root/root/ops; echo enabled > $root/state
while true; do sleep 0.05; done
"""
REFUSING = """echo 'Error: Terminal spec "rest" must have an empty match'; exit 1"""
NEVER = """trap 'exit 0' INT; while true; do sleep 0.05; done"""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    root = tmp_path / "sched_ext"
    (root / "root").mkdir(parents=True)
    (root / "state").write_text("disabled\n")
    (root / "root" / "ops").write_text("")
    monkeypatch.setattr(scx, "SCHED_EXT", root)
    monkeypatch.setattr("threadwise.runtime.supervisor.DISABLE_WAIT_S", 3.0)
    files = RunFiles(tmp_path / "run")
    files.root.mkdir()
    files.config.write_text("[]")

    def make(body: str, **kwargs) -> Supervisor:
        fake = tmp_path / "scx_layered"
        fake.write_text(FAKE.format(root=root, body=body))
        fake.chmod(0o755)
        monkeypatch.setenv("THREADWISE_SCX_LAYERED", str(fake))
        return Supervisor(files.config, files, source="test.json", **kwargs)

    make.root = root
    make.files = files
    return make


def when_attached(files, action):
    def run():
        for _ in range(200):
            state = read_state(files)
            if state is not None and state.phase == "attached":
                action(state)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_stop_request_unregisters_cleanly(lab):
    supervisor = lab(ATTACHING)
    when_attached(lab.files, lambda _state: setattr(supervisor, "stop_requested", True))
    report = supervisor.run()
    state = read_state(lab.files)
    assert report.kind == "unreg" and report.clean
    assert state.phase == "stopped"
    assert state.ops == "layered_fake"
    assert state.state_after == "disabled"
    assert state.attach_s > 0


def test_duration_ends_the_run(lab):
    report = lab(ATTACHING, duration_s=0.3).run()
    assert report.clean
    assert read_state(lab.files).phase == "stopped"


def test_kill_9_is_noticed_and_reported(lab):
    supervisor = lab(ATTACHING)

    def kill(state):
        os.kill(state.scx_pid, signal.SIGKILL)
        (lab.root / "state").write_text("disabled\n")  # what the kernel does

    when_attached(lab.files, kill)
    report = supervisor.run()
    state = read_state(lab.files)
    assert report.kind == "killed" and report.attached
    assert state.phase == "failed"
    assert state.exit.returncode == -signal.SIGKILL
    assert state.state_after == "disabled"


def test_refused_config_is_a_load_failure(lab):
    report = lab(REFUSING).run()
    state = read_state(lab.files)
    assert report.kind == "load_failure" and not report.attached
    assert "must have an empty match" in report.message
    assert state.phase == "failed"
    assert "attached_at" not in state.to_json()


def test_attach_timeout_stops_the_child(lab):
    report = lab(NEVER, attach_timeout_s=0.5).run()
    state = read_state(lab.files)
    assert report.kind == "attach_timeout"
    assert state.phase == "failed"
    with pytest.raises(ProcessLookupError):
        os.kill(state.scx_pid, 0)


def test_state_file_is_json_with_pids(lab):
    lab(ATTACHING, duration_s=0.2).run()
    state = json.loads(lab.files.state.read_text())
    assert state["supervisor_pid"] == os.getpid()
    assert isinstance(state["scx_start"], int)


def test_ctrl_c_reaching_both_is_a_requested_stop(lab):
    """In a terminal, Ctrl-C signals scx_layered and the supervisor at once."""
    supervisor = lab(ATTACHING)

    def ctrl_c(state):
        os.kill(state.scx_pid, signal.SIGINT)
        supervisor.stop_requested = True

    when_attached(lab.files, ctrl_c)
    report = supervisor.run()
    assert report.clean
    assert read_state(lab.files).phase == "stopped"
