"""`workload check` (and train, before it observes) refuses what a training would fail on later:
missing or non-executable programs, relative paths, what the lab guest cannot carry or would hide."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests import datafiles
from threadwise import givenclock
from threadwise.refine.measure import ingest, ladder
from threadwise.refine.measure.workload import bundled_workload_path, parse_workload

BUSYBOX = shutil.which("busybox")
needs_busybox = pytest.mark.skipif(BUSYBOX is None, reason="needs busybox: apt-get install busybox-static")

WORKLOAD = datafiles.text("refine/preflight-workload.toml")
SERVICE_LINE = 6   # the lines of WORKLOAD's two commands
LOAD_LINE = 13


def tw(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False, cwd=cwd)


def workload(tmp_path: Path, service: str = "true", load: str = "true", *, extra: str = "") -> Path:
    text = WORKLOAD.replace('"SERVICE"', json.dumps(service), 1).replace('"LOAD"', json.dumps(load), 1)
    text += extra
    path = tmp_path / "mine.toml"
    path.write_text(text)
    assert text.splitlines()[SERVICE_LINE - 1].startswith("command") and \
        text.splitlines()[LOAD_LINE - 1].startswith("command")
    return path


def executable(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(body)
    path.chmod(0o755)
    return path


def test_bundled_workloads_pass_with_what_the_guest_carries() -> None:
    done = tw("workload", "check", "rolesim", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "checked:   every program exists and is executable; the initramfs guest carries them" \
        in done.stdout
    assert "dry run: nothing was started" in done.stdout
    assert "ready_cmd() { grep -qF -- 'rolesim: ready'" in done.stdout
    carried = next(line for line in done.stdout.splitlines() if line.lstrip().startswith("carried into"))
    assert carried.rstrip().endswith("/rolesim") and "workloads/rolesim-" in carried


@pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None,
                    reason="needs redis-server and redis-benchmark (scripts/setup-system.sh)")
def test_the_dry_run_prints_plan_sh_as_the_ladder_renders_it() -> None:
    done = tw("workload", "check", "redis", "--dry-run")
    assert done.returncode == 0, done.stderr
    text = parse_workload(bundled_workload_path("redis").read_text())
    plan = ladder.make_plan(text, [ladder.Arm(ladder.BASELINE)], levels=[0], repeats=1, shape="host")
    script = ladder.plan_script(plan, attach_mode="direct", spin=Path("/bin/true"), scx=None, tcp_probe="nc",
                                tracer=None)
    for line in script.splitlines():
        if line.startswith(("service_cmd()", "ready_cmd()", "load_cmd()")):
            assert f"       {line}\n" in done.stdout
    assert "ready_cmd() { busybox nc -w 1 127.0.0.1 6399 -e true; }" in done.stdout
    assert shutil.which("redis-server") in done.stdout   # carried at its host path
    vng = tw("workload", "check", "redis", "--dry-run", "--guest", "vng")
    assert vng.returncode == 0, vng.stderr
    assert "nothing is carried: the guest sees this machine's files read-only" in vng.stdout


def test_a_missing_program_is_refused_at_its_line_and_train_refuses_it_before_observing(
        tmp_path: Path) -> None:
    path = workload(tmp_path, service="no-such-server-xyz")
    done = tw("workload", "check", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {path}:{SERVICE_LINE}: service.command runs 'no-such-server-xyz', "
                                  "which is not on PATH\n")
    assert "hint: install it, or write its absolute path" in done.stderr
    train = tw("train", "--workload", str(path), "--name", "mine", "--lab", cwd=tmp_path)
    assert train.returncode == 2 and "which is not on PATH" in train.stderr, train.stderr
    assert not (tmp_path / "build").exists()   # nothing observed, no work directory


def test_absent_not_executable_and_relative_programs(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(stat.S_IRUSR | stat.S_IWUSR)
    (tmp_path / "loadgen.py").write_text("print(1)\n")
    path = workload(tmp_path, service=str(plain), load="./bin/gen")
    path.write_text(path.read_text().replace('"-n", "5"', '"loadgen.py", "-n", "5"'))
    done = tw("workload", "check", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert f"{path}:{SERVICE_LINE}: service.command runs {plain}, which is not executable" in done.stderr
    assert f"chmod +x {plain}" in done.stderr
    assert (f"{path}:{LOAD_LINE}: load.command runs './bin/gen', a relative path: the ladder runs every "
            "command in its own run directory, where it is not") in done.stderr
    assert f"write its absolute path: {tmp_path / 'loadgen.py'}" in done.stderr   # the argument's
    absent = workload(tmp_path, service="/opt/no/such/server")
    done = tw("workload", "check", str(absent))
    assert "service.command runs /opt/no/such/server, which does not exist" in done.stderr


@needs_busybox
def test_an_interpreter_without_a_tree_is_refused_and_python_goes_on_the_runtime_disk(
        tmp_path: Path) -> None:
    perl = shutil.which("perl") or "/usr/bin/perl"
    path = workload(tmp_path, service=perl, load="true")
    path.write_text(path.read_text().replace('"--port", "7000"', '"-e", "sleep 1"'))
    done = tw("workload", "check", str(path))
    assert done.returncode == 2
    assert f"{path}:{SERVICE_LINE}: service.command runs {perl} (a " in done.stderr
    assert "cannot carry its library tree" in done.stderr
    assert "give the workload a compiled program, a POSIX shell script (#!/bin/sh), a JVM or Python " \
           "service, or measure with --guest vng" in done.stderr
    assert "plan_script" not in done.stderr and "tcp_probe" not in done.stderr
    assert tw("workload", "check", str(path), "--guest", "vng").returncode == 0
    # CPython is carried: the dry run names its trees (the stdlib, asked from the interpreter).
    # The base interpreter, not this checkout's venv: a checkout under /tmp would be refused.
    base = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")
    python = workload(tmp_path, service=base, load="true")
    python.write_text(python.read_text().replace('"--port", "7000"', '"-m", "http.server", "7000"'))
    done = tw("workload", "check", str(python), "--dry-run")
    assert done.returncode == 0, done.stderr
    stdlib = str(Path(shutil.__file__).parent)
    assert "on the guest's read-only runtime disk" in done.stdout
    assert f"{stdlib} (on {base}'s sys.path)" in done.stdout


@needs_busybox
def test_programs_and_files_under_tmp_are_refused_and_other_files_are_carried(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/"), "pytest's tmp_path is under /tmp here"
    server = executable(tmp_path / "server")
    path = workload(tmp_path, service=str(server), load="true")
    path.write_text(path.read_text().replace('"-n", "5"', f'"--config", "{tmp_path / "mine.toml"}"'))
    done = tw("workload", "check", str(path))
    assert done.returncode == 2
    assert (f"{path}:{SERVICE_LINE}: service.command names {server}, under /tmp: the lab guest's init "
            "mounts a fresh tmpfs on /tmp, so it would not be found there") in done.stderr
    assert (f"{path}:{LOAD_LINE}: load.command names {tmp_path / 'mine.toml'}, under /tmp") in done.stderr
    assert "move it out of /tmp" in done.stderr
    vng = tw("workload", "check", str(path), "--guest", "vng")   # the vng guest sees the host's /tmp
    assert vng.returncode == 0, vng.stderr
    # a file of this host outside /tmp is carried into the image, like a program
    config = Path(json.__file__)   # the stdlib: outside /tmp, also when this checkout is under /tmp
    path.write_text(WORKLOAD.replace('"SERVICE"', '"true"').replace('"LOAD"', '"true"')
                    .replace('"-n", "5"', f'"--config", "{config}"'))
    done = tw("workload", "check", str(path))
    assert done.returncode == 0, done.stderr


def test_a_service_that_died_says_what_its_stderr_said(tmp_path: Path) -> None:
    plan = ladder.make_plan(parse_workload(bundled_workload_path("rolesim").read_text()),
                            [ladder.Arm(ladder.BASELINE)], levels=[0], repeats=1, shape="host")
    (tmp_path / "failed").write_text("service-died\n")
    (tmp_path / "agent.log").write_text("agent: [3.1] service: exited before it was ready\n")
    (tmp_path / "service.err").write_text("\nsh: /tmp/mine/server: not found\n")
    execution = ladder.Execution(None, 2, True, 1.0, 3)
    stopped = ingest._where_stopped(tmp_path, plan, 0, execution)
    assert stopped == ("stopped after 0 of 1 cells (service-died); last agent line: agent: [3.1] "
                       "service: exited before it was ready; the service's stderr ends: "
                       "sh: /tmp/mine/server: not found")
