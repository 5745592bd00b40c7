"""Test tiers: unmarked tests are fast; `bpf` traces this host; `lab` boots the sched_ext VM;
`scx` runs the real scx_layered (`--print-and-exit`, no sched_ext needed) or reads its crate source.

A tier that cannot run here is skipped with the exact reason (what is missing
and how to get it), never silently. A test that asks for the real scx_layered
(the `scx_binary` or `crate_src` fixture) without the `scx` marker is a
collection error: it would otherwise fail, not skip, where the binary is missing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.runtime.lab.turns import host_slots, take_turn


def bpf_missing() -> str | None:
    """Why the bpf tier cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "bpf tier needs root (bpftrace loads BPF programs): run the tests as root"
    if shutil.which("bpftrace") is None:
        return "bpf tier needs bpftrace: run scripts/setup-system.sh"
    if not Path("/sys/kernel/tracing/events/sched/sched_switch").exists():
        return "bpf tier needs tracefs: mount -t tracefs nodev /sys/kernel/tracing"
    return None


SCX_FIXTURES = ("scx_binary", "crate_src")


def crate_source() -> Path | None:
    """The scx_layered crate source cargo fetched (config.rs, main.rs, intf.h), if any."""
    from threadwise.scx import SCX_LAYERED_VERSION

    home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    found = sorted(glob.glob(f"{home}/registry/src/*/scx_layered-{SCX_LAYERED_VERSION}"))
    return Path(found[-1]) if found else None


def scx_missing(*, source: bool) -> str | None:
    """Why the scx tier cannot run here (the binary, or with `source` its crate source), or None."""
    from threadwise.errors import MissingTool
    from threadwise.scx import scx_layered_path

    try:
        scx_layered_path()
    except MissingTool as missing:
        return f"scx tier: {missing.message}: {missing.hint}"
    if source and crate_source() is None:
        return ("scx tier needs the scx_layered crate source under ~/.cargo/registry/src: "
                "run scripts/setup-scx.sh (cargo install fetches it)")
    return None


# A lab VM, and a ground-truth capture (alone_with_labs), waits its turn while another lab runs on
# the host (runtime/lab/turns.py). The wait does not count against the test's time limit (turns.py
# stops pytest-timeout's alarm while it waits), so this limit bounds a test's own minutes: a
# module's shared lab boot and its cells on a busy host, for which the suite's 900 s is short.
CAPTURE_FIXTURES = ("rolesim_capture", "redis_capture", "jvm_capture")
WAITS_FOR_LABS_TIMEOUT_S = 1800


# A test phase longer than this is named as it ends (setup includes a module's shared lab boot),
# so a run cut short by its time limit still shows where its minutes went.
SLOW_PHASE_S = 60.0
_CONFIG: list[pytest.Config] = []


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} to the test run")


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG.append(config)   # the terminal reporter registers later: looked up when needed
    # A SIGTERM ends the run as Ctrl-C does, with every teardown and `finally`: the lab's VM runs in
    # a session of its own (vng.py), and a plain SIGTERM death of pytest left it running, orphaned
    # (a make test stopped by its process group, 2026-12-07).
    with contextlib.suppress(ValueError):   # not the main thread: signals cannot be caught there
        signal.signal(signal.SIGTERM, _interrupt)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name a slow phase, and a failure's reason, as they happen: a run cut short by its time
    limit, or an output shown only in part, still says where the minutes went and what failed."""
    terminal = _CONFIG[-1].pluginmanager.get_plugin("terminalreporter") if _CONFIG else None
    if terminal is None:
        return
    if report.duration >= SLOW_PHASE_S:
        terminal.write_line(f"\n[slow] {report.nodeid} {report.when}: {report.duration:.0f} s "
                            f"({report.outcome}) at {time.strftime('%H:%M:%S')}")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        why = (crash.message if crash is not None else str(report.longrepr)).strip().splitlines()
        terminal.write_line(f"\n[failed] {report.nodeid} {report.when}: {' | '.join(why[:6])[:600]}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items if "scx" not in item.keywords
                and set(SCX_FIXTURES) & set(getattr(item, "fixturenames", ()))]
    if unmarked:
        raise pytest.UsageError(f"these tests use the real scx_layered but are not marked scx: {unmarked}")
    bpf = bpf_missing()
    scx = {source: scx_missing(source=source) for source in (False, True)}
    for item in items:
        if bpf and "bpf" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=bpf))
        waits = "lab" in item.keywords or set(CAPTURE_FIXTURES) & set(getattr(item, "fixturenames", ()))
        if waits and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(WAITS_FOR_LABS_TIMEOUT_S))
        reason = scx["crate_src" in getattr(item, "fixturenames", ())]
        if reason and "scx" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def nobody_python():
    """This checkout's Python as uid 65534 (tests/unprivileged.py: a readable hard-linked copy when
    the checkout lives where that user cannot reach it, e.g. under /root); skips with the reason."""
    from tests.unprivileged import CannotCopy, user_python

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running as an unprivileged user needs root and setpriv (util-linux)")
    try:
        python = user_python()
    except CannotCopy as why:
        pytest.skip(str(why))
    yield python
    python.remove()


# --- live workloads, captured once per session and shared by the stages' bpf tests ---

ROLESIM_ARGS = ("--hot", "2", "--workers", "3")
# Every capture-based test runs once per tracer backend: the capture contract is the same.
BACKENDS = ("libbpf", "bpftrace")


def tracer_missing(backend: str) -> str | None:
    """Why `backend` cannot trace here (beyond the bpf tier's own needs), or None."""
    if backend == "libbpf":
        from threadwise.observe import tracer_build

        if not tracer_build.binary_path().is_file():
            return ("the libbpf tracer is not built for these sources: run scripts/setup-tracer.sh "
                    "(make setup does)")
    return None


@pytest.fixture(scope="session", params=BACKENDS)
def tracer_backend(request: pytest.FixtureRequest) -> str:
    reason = tracer_missing(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


@contextlib.contextmanager
def alone_with_labs(what: str) -> Iterator[None]:
    """A ground-truth capture takes the whole host's turn (runtime/lab/turns.py): no lab boots
    while it runs. A lab claims the host at nice -20 (hostpriority.py), and beside one the
    workload whose behaviour these tests check was starved into other behaviour (issue 32:
    housekeep's wake interval CV 1.20 against < 0.3; Redis's io threads no longer pollers). It
    waits for a running lab VM to end; other work still shares the host."""
    with take_turn(host_slots(), lambda line: print(f"{what}: {line}", flush=True)):
        yield


@pytest.fixture(scope="session")
def rolesim_capture(tmp_path_factory: pytest.TempPathFactory, tracer_backend: str) -> Path:
    """A 5 s capture of the bundled workload, launched by the observer (per backend)."""
    from threadwise.observe.capture import observe
    from threadwise.observe.target import Target
    from threadwise.refine.measure.bundled import build

    out = tmp_path_factory.mktemp(f"rolesim-{tracer_backend}") / "rolesim.duckdb"
    target = Target.from_options(pid=None, comm=None, cgroup=None,
                                 command=[str(build("rolesim")), *ROLESIM_ARGS])
    with alone_with_labs(f"rolesim capture ({tracer_backend})"):
        observe(target, out, duration_s=5.0, backend_name=tracer_backend, progress=lambda _m: None)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_by_pid(proc: subprocess.Popen, how: signal.Signals = signal.SIGTERM, grace_s: float = 10) -> None:
    """Stop a process a test started: `how` to its PID, SIGKILL after `grace_s` (never by name)."""
    if proc.poll() is not None:
        return
    proc.send_signal(how)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_for_port(port: int, server: int, timeout_s: float = 10) -> None:
    """Until `server` (a pid) listens on `port`, for `timeout_s` of host time given to it."""
    import socket

    deadline = givenclock.Deadline.start(server, timeout_s)
    while not deadline.passed():
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"redis did not listen on {port}")


REDIS_IO_BLOCKS = 30   # io-thread sleeps (each ends in a wakeup by the main thread) the capture must hold
REDIS_MAX_S = 90       # but never observe longer than this
NICE_WORKLOAD = ["nice", "-n", "-10"]   # tests run as root; a busy machine must not starve the workload


def _io_thread_sleeps(pid: int) -> int:
    """Voluntary context switches of Redis's io_thd_* threads: how often they went to sleep."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith("io_thd_"):
                continue
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


@pytest.fixture(scope="session")
def redis_capture(tmp_path_factory: pytest.TempPathFactory, tracer_backend: str) -> Path:
    """Our own redis-server on loopback (io threads, AOF) under redis-benchmark, observed
    with `threadwise observe --pid` for at least 5 s and until its io threads have slept
    (and so been woken) REDIS_IO_BLOCKS times; stopped with Ctrl-C, which keeps the capture.
    On a busy machine Redis serves a few thousand commands/s instead of ~100k and keeps its
    io threads spinning, so a fixed 5 s held one main -> io_thd wakeup and the wake-chain
    tests had nothing to judge. The server and its benchmark also run at nice -10 (the tests
    are about what analyze makes of Redis at work, not of Redis starved). The server is
    stopped by its PID."""
    import sys

    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        pytest.skip("needs redis-server and redis-benchmark: run scripts/setup-system.sh")
    port = _free_port()
    workdir = tmp_path_factory.mktemp(f"redis-{tracer_backend}")
    with alone_with_labs(f"redis capture ({tracer_backend})"):
        server = subprocess.Popen(
            [*NICE_WORKLOAD, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--io-threads", "2",
             "--io-threads-do-reads", "yes", "--save", "", "--dir", str(workdir), "--daemonize", "no",
             # an AOF fsynced every second gives the bio_aof_fsync thread real work
             "--appendonly", "yes", "--appendfsync", "everysec"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)   # nice execs: server.pid is Redis
        try:
            _wait_for_port(port, server.pid)
            out = workdir / "redis.duckdb"
            observer = subprocess.Popen(
                [sys.executable, "-m", "threadwise.cli", "observe", "--pid", str(server.pid),
                 "-d", f"{REDIS_MAX_S}s", "--backend", tracer_backend, "-o", str(out)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert observer.stderr is not None
            for line in observer.stderr:   # load starts once tracing is live
                if "tracing live" in line:
                    break
            began = time.monotonic()
            sleeps_at_start, sleeps = _io_thread_sleeps(server.pid), 0
            bench = subprocess.Popen(
                [*NICE_WORKLOAD, "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50",
                 "-n", "20000000", "-t", "set,get", "-q"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while time.monotonic() - began < REDIS_MAX_S - 5 and observer.poll() is None:
                time.sleep(0.5)
                sleeps = _io_thread_sleeps(server.pid) - sleeps_at_start
                if time.monotonic() - began >= 5 and sleeps >= REDIS_IO_BLOCKS:
                    break
            print(f"redis capture ({tracer_backend}): io threads slept {sleeps:,} times in "
                  f"{time.monotonic() - began:.1f} s")
            if observer.poll() is None:
                observer.send_signal(signal.SIGINT)
            # host time given, not wall time: beside a lab that claims the host, building the
            # capture's tables waits for a CPU most of the time (threadwise.givenclock)
            _stdout, stderr = givenclock.communicate(observer, timeout=120)
            bench.send_signal(signal.SIGTERM)
            bench.wait(timeout=30)
            assert observer.returncode == 0, stderr
            return out
        finally:
            stop_by_pid(server)


JVM_SOURCE = Path(__file__).parents[1] / "refine" / "workloads" / "PoolService.java"


@pytest.fixture(scope="session")
def jvm_capture(tmp_path_factory: pytest.TempPathFactory, tracer_backend: str) -> Path:
    """Our JVM service with named pools (refine/workloads/PoolService.java: a CPU-busy request pool
    feeding a writer and an acceptor through queues, a periodic flusher, the JVM's own
    threads), observed with `threadwise observe --pid` for 5 s once it serves; stopped by PID."""
    import sys

    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac, java): apt-get install openjdk-17-jdk-headless")
    workdir = tmp_path_factory.mktemp(f"jvm-{tracer_backend}")
    givenclock.run(["javac", "-d", str(workdir), str(JVM_SOURCE)], check=True, timeout=120)
    with alone_with_labs(f"JVM capture ({tracer_backend})"):
        service = subprocess.Popen(["java", "-Xmx256m", "-cp", str(workdir), "PoolService", "60"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert service.stdout is not None
            seconds = 0
            for line in service.stdout:   # "ready", then one line a second: 2 s past JVM start-up
                seconds += line.startswith("requests/s")
                if seconds == 2:
                    break
            out = workdir / "jvm.duckdb"
            done = givenclock.run(
                [sys.executable, "-m", "threadwise.cli", "observe", "--pid", str(service.pid), "-d", "5s",
                 "--backend", tracer_backend, "-o", str(out)],
                capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            return out
        finally:
            stop_by_pid(service)
