"""The supervisor against a fake scx_layered and a fake /sys/kernel/sched_ext (fast tier).

The fake plays the kernel too: it writes `enabled` + ops when "attached" and
`disabled` when it unregisters on SIGINT. For kill -9 the test plays the
kernel (a real kernel detaches a dead scheduler by itself).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

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


# the fake's nice while it "loads" (the 19th field of its stat), then it attaches
NICE_WHILE_LOADING = """
trap 'echo "EXIT: unregistered from user space"; echo disabled > $root/state; : > $root/root/ops; exit 0' INT
read -r st < /proc/$$/stat; set -- ${st##*) }; echo "${17}" > $root/load_nice
echo layered_fake > $root/root/ops; echo enabled > $root/state
while true; do sleep 0.05; done
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority (nice -20) needs root")
def test_scx_layered_loads_at_nice_minus_20_and_runs_at_nice_0(lab):
    said: list[str] = []
    supervisor = lab(NICE_WHILE_LOADING, log=said.append)
    seen: dict[str, int] = {}

    def look(state):
        seen["running"] = os.getpriority(os.PRIO_PROCESS, state.scx_pid)
        supervisor.stop_requested = True

    when_attached(lab.files, look)
    supervisor.run()
    assert (lab.root / "load_nice").read_text().strip() == "-20"
    assert seen["running"] == 0
    assert any("(loaded at nice -20, runs at 0)" in line for line in said), said


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority (nice -20) needs root")
def test_the_detached_supervisor_runs_at_nice_0_when_applied_from_nice_minus_20(lab, tmp_path):
    """A test driver (or a user) may run `threadwise apply` at nice -20: the supervisor it starts
    and scx_layered still run at nice 0 once attached."""
    parent_nice = 'echo "$(ps -o ni= -p $PPID)" > $root/parent_nice\n'
    lab(NICE_WHILE_LOADING.replace("while true", parent_nice + "while true"))
    code = (f"import os, sys; from pathlib import Path; os.nice(-20)\n"
            f"from threadwise.runtime import scx; scx.SCHED_EXT = Path({str(lab.root)!r})\n"
            f"from threadwise.runtime import supervisor; supervisor.DISABLE_WAIT_S = 3.0\n"
            f"sys.exit(supervisor.main(['--run-dir', {str(lab.files.root)!r}, '--source', 't.json', "
            f"'--duration', '1']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (lab.root / "load_nice").read_text().strip() == "-20"
    assert (lab.root / "parent_nice").read_text().strip() == "0"
    assert "(loaded at nice -20, runs at 0)" in done.stdout, done.stdout


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


def a_holder() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def test_a_holder_killed_by_sigkill_takes_its_profile_down(lab):
    """A canary SIGKILLed mid-trial cannot roll back; its supervisor does (runtime/holder.py)."""
    from threadwise.runtime import holder

    canary = a_holder()
    holder.hold(lab.files, canary.pid)
    supervisor = lab(ATTACHING)

    def kill(_state):
        canary.kill()
        canary.wait()   # reaped: its pid is gone, as a dead canary's is

    when_attached(lab.files, kill)
    report = supervisor.run()
    state = read_state(lab.files)
    assert report.clean and state.phase == "stopped" and state.state_after == "disabled"
    assert f"(pid {canary.pid}) ended without a decision" in state.stop_reason


def test_a_released_profile_outlives_its_holder(lab):
    from threadwise.runtime import holder

    canary = a_holder()
    holder.hold(lab.files, canary.pid)
    supervisor = lab(ATTACHING, duration_s=1.5)

    def keep_then_die(_state):
        holder.release(lab.files)   # kept: the canary hands it over, then exits
        canary.kill()
        canary.wait()

    when_attached(lab.files, keep_then_die)
    started = time.monotonic()
    supervisor.run()
    state = read_state(lab.files)
    assert time.monotonic() - started >= 1.5 and state.stop_reason is None   # ran to its duration


def test_a_pid_reused_by_another_process_is_not_the_holder(lab):
    from threadwise.runtime import holder

    holder.hold(lab.files, os.getpid())
    lab.files.holder.write_text(json.dumps({"pid": os.getpid(), "start": 1}))   # another process's start
    assert "ended without a decision" in holder.holder_gone(lab.files)
    holder.hold(lab.files, os.getpid())
    assert holder.holder_gone(lab.files) is None
    holder.release(lab.files)
    assert holder.holder_gone(lab.files) is None


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


RECORDING = 'printf "%s\\n" "$@" > $root/argv\n' + ATTACHING


def test_the_profiles_flags_reach_scx_layered_before_the_config(lab) -> None:
    lab(RECORDING, duration_s=0.2, scx_args=("--interval", "5")).run()
    argv = (lab.root / "argv").read_text().splitlines()
    assert argv == ["--enable-match-debug", "--interval", "5", f"f:{lab.files.config}"]
    assert read_state(lab.files).phase == "stopped"


def test_launcher_argv_carries_the_flags_through_the_supervisors_parser(lab, monkeypatch) -> None:
    """apply_background's supervisor command line, run by supervisor.main, starts scx_layered with
    the resolved config's flags (the launch itself replaced: no detached process here)."""
    from threadwise.runtime import launcher
    from threadwise.runtime.config import ResolvedConfig
    from threadwise.runtime.state import Phase, RunState, write_state
    from threadwise.runtime.supervisor import main
    from threadwise.synthesize.layered import LayerConfig

    lab(RECORDING)   # installs the fake scx_layered
    started: list[list[str]] = []

    class Launched:
        pid = 0

        def __init__(self, argv: list[str], **_kw: object) -> None:
            started.append(argv)
            write_state(lab.files, RunState(Phase.ATTACHED))

        def poll(self) -> int | None:
            return None

    # the launcher's own module handle only: the supervisor below starts the fake for real
    monkeypatch.setattr(launcher, "subprocess", SimpleNamespace(
        Popen=Launched, DEVNULL=subprocess.DEVNULL, STDOUT=subprocess.STDOUT))
    resolved = ResolvedConfig(config=LayerConfig(()), source="p.toml", kind="profile", shape="cores=2",
                              scx_args=("--interval", "0.25"))
    launcher.apply_background(resolved, lab.files, attach_timeout_s=1.0, duration_s=0.2)
    [argv] = started
    assert argv[-2:] == ["--scx-arg=--interval", "--scx-arg=0.25"]
    assert argv[argv.index("--run-dir") + 1] == str(lab.files.root)
    assert main(argv[3:]) == 0            # python -m MARKER <these>
    assert (lab.root / "argv").read_text().splitlines() == [
        "--enable-match-debug", "--interval", "0.25", f"f:{lab.files.config}"]


def test_the_foreground_apply_passes_the_profiles_flags_too(lab) -> None:
    """apply --foreground supervises in-process: the resolved config's flags reach scx_layered as
    they do through the detached supervisor's --scx-arg."""
    from threadwise.runtime import launcher
    from threadwise.runtime.config import ResolvedConfig
    from threadwise.synthesize.layered import LayerConfig

    lab(RECORDING)   # installs the fake scx_layered
    resolved = ResolvedConfig(config=LayerConfig(()), source="p.toml", kind="profile", shape="cores=2",
                              scx_args=("--interval", "5"))
    state = launcher.apply_foreground(resolved, lab.files, attach_timeout_s=5.0, duration_s=0.2,
                                      log=lambda _msg: None)
    assert state.phase == "stopped"
    assert (lab.root / "argv").read_text().splitlines() == [
        "--enable-match-debug", "--interval", "5", f"f:{lab.files.config}"]
