"""What a ladder hands the guest besides the layer config: scx_layered's flags (a profile's
[scheduler] table, arms/<arm>.args) and the load generator's command line (under `chrt -f 1`).

Fast tier, nothing boots and nothing attaches: write_plan's files, the agent's attach step
with a stand-in scx_layered that records its argv, an arm compiled from a profile file (a
stand-in oracle), and what the initramfs packer would carry for a fifo load command (stopped
before it needs the lab kernel).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import datafiles
from threadwise import givenclock
from threadwise.refine.measure import ladder
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.workload import parse_workload
from threadwise.runtime import membership
from threadwise.runtime.lab import initramfs
from threadwise.scx import DEFAULT_INTERVAL_MS, interval_args, step_interval_ms
from threadwise.synthesize.layered import LayerConfig

SPECS = [{"name": "rest", "matches": [[]], "kind": {"Open": {}}}]
CONFIG = LayerConfig.from_json_data(SPECS)
PROFILE = datafiles.text("refine/plan-flags-profile.toml")
# A workload whose load command is a program on PATH (no service: nothing else to pack).
WORKLOAD = datafiles.text("refine/plan-flags-workload.toml")


def _plan(*arms: Arm, workload: str = WORKLOAD) -> ladder.Plan:
    return ladder.make_plan(parse_workload(workload), [Arm(BASELINE), *arms], levels=[0], repeats=1,
                            shape="cores=2,threads-per-core=1", workload_toml=workload)


def _script(plan: ladder.Plan, scx: Path = Path("/x/scx")) -> str:
    return ladder.plan_script(plan, attach_mode="direct", spin=Path("/x/spin"), scx=scx, tcp_probe="nc",
                              tracer=None)


def _executable(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)
    return path


# --- scx_layered's flags --------------------------------------------------------------------------


def test_write_plan_writes_one_flag_a_line_only_for_arms_that_have_flags(tmp_path: Path) -> None:
    tuned = Arm("tuned", PROFILE, CONFIG, ("--interval", "5"))
    plain = Arm("plain", PROFILE, CONFIG)   # e.g. a JSON config: no [scheduler]
    plan = _plan(tuned, plain)
    ladder.write_plan(plan, tmp_path, _script(plan))
    assert (tmp_path / "arms" / "tuned.args").read_text() == "--interval\n5\n"
    assert not (tmp_path / "arms" / "plain.args").exists()
    assert not (tmp_path / "arms" / f"{BASELINE}.args").exists()
    assert json.loads((tmp_path / "arms" / "tuned.json").read_text()) == SPECS
    # each attach names the arm's userspace step (ms): the agent waits for the first one, which
    # gives the layers their CPUs; an arm without flags runs at scx_layered's own 0.1 s
    steps = (tmp_path / "plan.sh").read_text().splitlines()
    assert "attach tuned 5000" in steps and "attach plain 100" in steps


def test_step_interval_reads_the_interval_flag_back_in_either_spelling() -> None:
    assert step_interval_ms(interval_args(5000)) == 5000
    assert step_interval_ms(("--interval=0.25", "--other")) == 250
    assert step_interval_ms(("--interval", "1", "--interval", "2")) == 2000   # clap: the last wins
    assert step_interval_ms(()) == DEFAULT_INTERVAL_MS == 100


def _sched_ext_enabled() -> bool:
    state = Path("/sys/kernel/sched_ext/state")
    return state.exists() and state.read_text().strip() == "enabled"


@pytest.mark.skipif(_sched_ext_enabled(),
                    reason="a sched_ext scheduler is attached here: the agent would take it for its own")
@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_the_agent_starts_scx_layered_with_the_arms_flags(tmp_path: Path, shell: str) -> None:
    """agent.sh's direct attach, with a stand-in scx_layered that records its argv and exits: the
    agent reports the attach failed (no sched_ext here), after starting it with the arm's flags."""
    if shutil.which(shell) is None:
        pytest.skip(f"needs {shell}")
    out = tmp_path / "out"
    (out / "arms").mkdir(parents=True)
    record = tmp_path / "argv"
    scx = _executable(tmp_path / "scx_layered", f"printf '%s\\n' \"$@\" >> '{record}'\n")
    for arm, flags in (("tuned", "--interval\n5\n"), ("plain", None)):
        (out / "arms" / f"{arm}.json").write_text(json.dumps(SPECS))
        if flags is not None:
            (out / "arms" / f"{arm}.args").write_text(flags)
        (out / "plan.sh").write_text(f"ATTACH_MODE=direct\nSCX={scx}\nATTACH_TIMEOUT=20\nattach {arm}\n")
        argv = [shell, "sh"] if shell == "busybox" else [shell]
        done = givenclock.run([*argv, str(ladder.agent_path()), str(out)], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 4, (done.stdout, done.stderr)   # attach failed: no sched_ext
        assert (out / "failed").read_text() == f"attach-{arm}\n"
    assert record.read_text().splitlines() == [
        "--enable-match-debug", "--interval", "5", f"f:{out}/arms/tuned.json",
        "--enable-match-debug", f"f:{out}/arms/plain.json"]


# A stand-in scx_layered --print-and-exit: prints back the config it was given.
ECHO_CONFIG = "for a in \"$@\"; do case \"$a\" in f:*) printf 'specs='; cat \"${a#f:}\";; esac; done\n"


def test_an_arm_compiled_from_a_profile_carries_its_flags(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from threadwise.refine.measure.run import arm_from_file
    from threadwise.shape import synthetic

    oracle = _executable(tmp_path / "scx_layered", ECHO_CONFIG)
    monkeypatch.setenv("THREADWISE_SCX_LAYERED", str(oracle))
    plain = tmp_path / "plain.toml"
    plain.write_text(PROFILE)
    assert arm_from_file(plain, synthetic(2)).scx_args == ("--interval", "5")  # preset
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(PROFILE + "[scheduler]\ninterval_ms = 1000\n")
    arm = arm_from_file(tuned, synthetic(2))
    assert (arm.name, arm.scx_args) == ("tuned", ("--interval", "1"))


def test_an_arm_passes_the_searchs_gate_and_a_lint_refusal_names_the_file_and_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ladder --arm FILE` is vetted as a search's candidate is: the sample profile's two exclusive
    worker cores do not fit 2 cores with one reserved, so lint refuses it before anything runs."""
    from threadwise.errors import UsageError
    from threadwise.refine.measure.run import arm_from_file
    from threadwise.shape import synthetic
    from threadwise.synthesize.example import example_profile
    from threadwise.synthesize.writer import dumps

    monkeypatch.setenv("THREADWISE_SCX_LAYERED", str(_executable(tmp_path / "scx_layered", ECHO_CONFIG)))
    sample = tmp_path / "sample.toml"
    sample.write_text(dumps(example_profile("sample")))
    with pytest.raises(UsageError) as refused:
        arm_from_file(sample, synthetic(2))
    assert str(sample) in refused.value.message and "lint refuses it: oversubscribed" in refused.value.message
    assert f"threadwise lint {sample} --shape cores=2,threads-per-core=1" in (refused.value.hint or "")
    assert arm_from_file(sample, synthetic(8)).name == "sample"   # it fits a larger guest


# --- the load generator ---------------------------------------------------------------------------


def test_the_plan_runs_the_load_command_under_fifo_by_its_absolute_path() -> None:
    benchmark = shutil.which("redis-benchmark") or "redis-benchmark"
    script = _script(_plan()).splitlines()
    assert (f"load_cmd() {{ exec chrt -f 1 {benchmark} -p 6399 -t get -n 100 --csv; }}") in script
    normal = WORKLOAD.replace('parser = "redis-benchmark"', 'parser = "redis-benchmark"\npriority = "normal"')
    assert ("load_cmd() { exec redis-benchmark -p 6399 -t get -n 100 --csv; }"
            in _script(_plan(workload=normal)).splitlines())


class _Stop(Exception):
    """Raised where pack would look for the lab kernel: the plan's programs are packed by then."""


@pytest.mark.skipif(shutil.which("busybox") is None, reason="needs busybox: apt-get install busybox-static")
@pytest.mark.skipif(shutil.which("redis-benchmark") is None or shutil.which("chrt") is None,
                    reason="needs redis-benchmark and chrt on PATH (scripts/setup-system.sh)")
def test_the_initramfs_packer_carries_chrt_and_the_generator_by_its_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packed: list[tuple[str, str]] = []
    executable = initramfs.Packer.executable

    def recording(self: initramfs.Packer, path: Path, *, why: str) -> None:
        packed.append((str(path), why))
        executable(self, path, why=why)

    def no_kernel() -> None:
        raise _Stop

    monkeypatch.setattr(initramfs.Packer, "executable", recording)
    monkeypatch.setattr(initramfs, "find_lab_kernel", no_kernel)
    monkeypatch.setattr(initramfs, "_bpftool", lambda: _executable(tmp_path / "bpftool", ""))
    scx = _executable(tmp_path / "scx_layered", "")
    plan = _plan(Arm("tuned", PROFILE, CONFIG, ("--interval", "5")))
    script = ladder.plan_script(plan, attach_mode="direct", spin=_executable(tmp_path / "spin", ""), scx=scx,
                                tcp_probe="nc", tracer=None)
    ladder.write_plan(plan, tmp_path, script)
    with pytest.raises(_Stop):
        initramfs.pack(tmp_path, dest=tmp_path / "img")
    generator = shutil.which("redis-benchmark")
    assert (generator, "plan.sh's load_cmd") in packed     # chrt's argument, at its host path
    chrt_packed = [path for path, why in packed if why == "plan.sh's load_cmd" and Path(path).name == "chrt"]
    applet = "chrt" in initramfs.busybox_applets(initramfs.find_busybox())
    assert bool(chrt_packed) is not applet                  # busybox's chrt, or the host's packed


# --- the membership probe's place: out of the measured window when the target outlives it ------


def test_a_service_workload_probes_after_the_window_and_a_load_that_is_the_target_within_it() -> None:
    assert "PROBE_AT=after" in _script(_plan()).splitlines()
    no_service = WORKLOAD.split("[service]", 1)[0] + "[target]" + WORKLOAD.split("[target]", 1)[1]
    assert "PROBE_AT=mid" in _script(_plan(workload=no_service)).splitlines()


@pytest.mark.parametrize("probe_at", ["after", "mid"])
@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_the_agent_runs_the_membership_probe_where_the_plan_says(tmp_path: Path, shell: str,
                                                                  probe_at: str) -> None:
    """One attached cell of agent.sh with a stand-in bpftool that stamps /proc/uptime when the probe
    calls it: after the cell's window (`wall`) for a service, inside it for a load that is the target."""
    if shutil.which(shell) is None:
        pytest.skip(f"needs {shell}")
    out, bin_dir = tmp_path / "out", tmp_path / "bin"
    out.mkdir()
    bin_dir.mkdir()
    stamp = tmp_path / "probed"
    _executable(bin_dir / "bpftool", f"cut -d' ' -f1 /proc/uptime > '{stamp}'\necho '[]'\n")
    (out / "plan.sh").write_text(
        "TARGET=sh\nWARMUP=0\nWINDOW=1\nMEMBERSHIP_AT=0.3\nLOAD_TIMEOUT=30\nLOAD_SOURCE=service\n"
        f"PROBE_AT={probe_at}\nSPIN=/bin/true\nSPIN_ARGS=\nATTACHED=stand-in\ncell 0 arm 0 1\n")
    argv = [shell, "sh"] if shell == "busybox" else [shell]
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    done = givenclock.run([*argv, str(ladder.agent_path()), str(out)], capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    assert done.returncode == 0, (done.stdout, done.stderr, (out / "agent.log").read_text())
    start, end = (float(v) for v in (out / "cells" / "0" / "wall").read_text().split())
    probed = float(stamp.read_text())
    assert (probed >= end) if probe_at == "after" else (start <= probed <= end), (start, probed, end)
    assert (out / "cells" / "0" / "membership.json").read_text().strip() == "[]"
    assert (out / "cells" / "0" / "times.probe").exists() is (probe_at == "mid")


# --- the first userspace step: the layers get their CPUs only then ------------------------------


@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_the_agent_waits_for_the_first_step_since_scx_layered_started_running(tmp_path: Path,
                                                                              shell: str) -> None:
    """first_step sleeps until STEP_MS + 1 s have passed since the given start (uptime s), and not
    at all when they already have: a Confined layer has no CPU before scx_layered's first step."""
    if shutil.which(shell) is None:
        pytest.skip(f"needs {shell}")
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.sh").write_text(
        't0=$(uptime_s); first_step fresh 1500 "$t0"; t1=$(uptime_s)\n'
        'first_step old 1500 "$(awk -v t="$t1" \'BEGIN { print t - 10 }\')"; t2=$(uptime_s)\n'
        'echo "$t0 $t1 $t2" > "$OUT/stamps"\n')
    argv = [shell, "sh"] if shell == "busybox" else [shell]
    done = givenclock.run([*argv, str(ladder.agent_path()), str(out)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    t0, t1, _t2 = (float(v) for v in (out / "stamps").read_text().split())
    assert t1 - t0 >= 2.4          # 1.5 s step + 1 s margin, less /proc/uptime's and %.1f's rounding
    # started 10 s ago, its first step is long past: no sleep (the log's 0.0 s below; a wall-time
    # bound on t2 - t1 failed on a busy host, where the shell's own steps took a second)
    log = (out / "agent.log").read_text()
    # it sleeps what is left of 2.5 s since t0: 2.5 s, or less where the shell took time to get
    # there (2.2 s on a busy host)
    slept = re.search(r"attach fresh: first step \(every 1500 ms\) in (\d+\.\d) s", log)
    assert slept is not None and 1.5 <= float(slept.group(1)) <= 2.5, log
    assert "attach old: first step (every 1500 ms) in 0.0 s" in log


@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_the_agent_lists_each_spinner_thread_with_its_state_and_schedstat(tmp_path: Path, shell: str) -> None:
    """spin_stats writes "tid state run_ns wait_ns" per thread of $SPID (validity.py reads it): here
    a sleeping `sleep`, one thread in state S.

    The agent reads its spinner after the warm-up; the plan here reads once the child has exec'd
    `sleep`. Until then it is the forked shell, in state R, named `dash`, `busybox` or `exe`
    (busybox running itself through /proc/self/exe): on a busy host a read right after `&` found
    that in 48 of 50 tries, under either shell."""
    if shutil.which(shell) is None:
        pytest.skip(f"needs {shell}")
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.sh").write_text(
        'sleep 30 & SPID=$!; n=0\n'
        'until read -r c < "/proc/$SPID/comm" && [ "$c" = sleep ] || [ "$n" -ge 3000 ]; do\n'
        '    n=$((n + 1)); sleep 0.01\n'
        'done\n'
        'spin_stats "$OUT" before; kill "$SPID"; echo "$SPID" > "$OUT/spid"\n')
    argv = [shell, "sh"] if shell == "busybox" else [shell]
    done = givenclock.run([*argv, str(ladder.agent_path()), str(out)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    spid = (out / "spid").read_text().strip()
    [line] = (out / "spin.threads.before").read_text().splitlines()
    tid, state, run_ns, wait_ns = line.split()
    assert tid == spid and state in ("S", "R") and int(run_ns) >= 0 and int(wait_ns) >= 0
    assert (out / "spin.stat.before").read_text().startswith(f"{spid} (sleep) ")


def test_the_watchdog_allows_the_agents_longest_self_bounded_step_and_no_more() -> None:
    # a trace cell's start and send (60 + 300 s) is the longest step of a plain plan
    assert ladder.stall_bound(_plan()) == 60 + 300 + 180
    assert ladder.stall_bound(_plan(Arm("p", PROFILE, CONFIG, interval_args(2000)))) == 60 + 300 + 180
    # an attach waits for scx_layered's first step: a 200-s --interval makes it the longest
    slow_step = _plan(Arm("p", PROFILE, CONFIG, interval_args(200_000)))
    assert ladder.stall_bound(slow_step) == 240 + ladder.SETTLE_TIMEOUT_S + 200 + 180
    # a service that may take longer to be ready than anything else: its own bound decides
    ready = "ready = { tcp_port = 6399 }"
    slow = WORKLOAD.replace(ready, f"{ready}\nready_timeout_s = 900.0")
    assert ladder.stall_bound(_plan(workload=slow)) == 900 + 180


@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_the_agent_tells_threads_that_have_not_run_since_a_snapshot(tmp_path: Path, shell: str) -> None:
    """run_counts then idle_since on real processes: a sleeper that has not run since is listed, a
    thread that wakes every 10 ms is not (schedstat's count of times on a CPU)."""
    if shutil.which(shell) is None:
        pytest.skip(f"needs {shell}")
    sleeper = subprocess.Popen(["python3", "-c", "import time; print('up', flush=True); time.sleep(60)"],
                               stdout=subprocess.PIPE, text=True)
    waking = "import time\nprint('up', flush=True)\nwhile True: time.sleep(0.01)"
    waker = subprocess.Popen(["python3", "-c", waking], stdout=subprocess.PIPE, text=True)
    try:
        for proc in (sleeper, waker):
            assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        # "up" comes before the sleep: on a busy host the sleeper may still run on its way into it
        deadline = time.monotonic() + 30
        while membership.thread_state(sleeper.pid, sleeper.pid) != "S" and time.monotonic() < deadline:
            time.sleep(0.05)
        out = tmp_path / "out"
        (out / "arms").mkdir(parents=True)
        # target_pids matches comm by prefix: only these two are ours among python3 processes; the
        # idle read waits (up to 30 s) until the waker has run again, however busy the host is
        (out / "plan.sh").write_text(
            "TARGET=python3\ntarget_pids() { echo " + f"{sleeper.pid} {waker.pid}" + "; }\n"
            'run_counts > "$OUT/arms/a.ran"; n=0\n'
            f'while grep -qx "{waker.pid} $(cut -d" " -f3 /proc/{waker.pid}/schedstat)" "$OUT/arms/a.ran"'
            ' && [ "$n" -lt 3000 ]; do n=$((n + 1)); sleep 0.01; done\n'
            'idle_since "$OUT/arms/a.ran" > "$OUT/idle"\n')
        argv = [shell, "sh"] if shell == "busybox" else [shell]
        done = givenclock.run([*argv, str(ladder.agent_path()), str(out)], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, (done.stdout, done.stderr)
        counts = dict(line.split() for line in (out / "arms" / "a.ran").read_text().splitlines())
        assert str(sleeper.pid) in counts and str(waker.pid) in counts
        assert (out / "idle").read_text().split() == [str(sleeper.pid)]
    finally:
        for proc in (sleeper, waker):
            proc.kill()
            proc.wait()
