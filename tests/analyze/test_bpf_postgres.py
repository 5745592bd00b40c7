"""bpf tier: roles from process titles on a real PostgreSQL 15 under pgbench (issue 52,
docs/analyze.md "Roles from process titles").

Every PostgreSQL process has comm `postgres` and runs as user `postgres`, so neither names nor
users tell its roles apart; only the titles the processes write over their argv do
(`postgres: checkpointer`, `postgres: walwriter`, `postgres: USER DB HOST(PORT) STATE`). The test
runs its own server: `initdb` of a fresh data directory owned by `postgres` (in a directory of
its own under /tmp, which that user can reach), the postmaster started as `postgres` (setpriv,
which execs, so the pid Popen holds is the postmaster's) listening only on 127.0.0.1 on a free
port with its socket in the data directory, `pgbench -i` then `pgbench -c 2 -j 1` on 127.0.0.1
while `observe` captures the postmaster's process tree for CAPTURE_S (per tracer backend). The
server and its load run at nice -10 (NICE_WORKLOAD, set before the user is dropped), as the
other ground-truth captures do. Everything stops by PID: pgbench by SIGTERM, the postmaster by
SIGINT (PostgreSQL's fast shutdown); never by name.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import NICE_WORKLOAD, _free_port, alone_with_labs, stop_by_pid
from threadwise import givenclock
from threadwise.analyze import analyze_capture
from threadwise.analyze.model import Analysis
from threadwise.observe.capture import observe
from threadwise.observe.target import Target

pytestmark = [pytest.mark.bpf, pytest.mark.scx, pytest.mark.timeout(1800)]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
CAPTURE_S = 6.0
WARMUP_S = 2.0
LOAD_S = 120          # pgbench -T: longer than any capture; stopped by PID once the capture ends
AUXILIARY = ("postgres: checkpointer", "postgres: walwriter", "postgres: background writer")
AS_POSTGRES = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]


def tw(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _missing() -> str | None:
    if not (PG_BIN / "postgres").is_file() or not (PG_BIN / "pgbench").is_file():
        return "needs postgresql-15 and postgresql-contrib: run scripts/setup-system.sh"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux) to run PostgreSQL as user postgres"
    return None


def _wait_ready(port: int, server: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Until the postmaster accepts connections on 127.0.0.1:`port` (pg_isready)."""
    deadline = givenclock.Deadline.start(server.pid, timeout_s)
    while not deadline.passed():
        if server.poll() is not None:
            raise RuntimeError(f"postgres exited {server.returncode} before it was ready")
        probe = [str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
        if subprocess.run(probe, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise TimeoutError(f"postgres did not accept connections on {port}")


def _stop_postmaster(server: subprocess.Popen[bytes]) -> None:
    """PostgreSQL's fast shutdown (SIGINT to the postmaster's PID), SIGKILL after 30 s."""
    stop_by_pid(server, signal.SIGINT, grace_s=30)


@pytest.fixture
def postmaster() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A fresh PostgreSQL 15 on 127.0.0.1 (trust auth), its postmaster and port; removed after."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    home = Path(tempfile.mkdtemp(prefix="tw-pg-"))
    data = home / "data"
    shutil.chown(home, "postgres", "postgres")
    port = _free_port()
    try:
        givenclock.run([*AS_POSTGRES, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                        "-U", "postgres", "-E", "UTF8", "--no-sync"],
                       capture_output=True, text=True, timeout=300, check=True)
        server = subprocess.Popen([*NICE_WORKLOAD, *AS_POSTGRES, str(PG_BIN / "postgres"), "-D", str(data),
                                   "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                                   "-c", f"unix_socket_directories={data}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_ready(port, server)
            yield server, port
        finally:
            _stop_postmaster(server)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _pgbench(port: int, *args: str) -> list[str]:
    return [*NICE_WORKLOAD, str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
            *args, "postgres"]


def _capture(server: subprocess.Popen[bytes], port: int, backend: str, out: Path) -> Analysis:
    """pgbench's tables, then its load on 2 connections while `observe` traces the postmaster's
    process tree for CAPTURE_S; analyzed."""
    givenclock.run(_pgbench(port, "-i", "-q", "-s", "1"), capture_output=True, text=True,
                   timeout=300, check=True)
    with alone_with_labs(f"postgres capture ({backend})"):
        load = subprocess.Popen(_pgbench(port, "-c", "2", "-j", "1", "-T", str(LOAD_S)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(WARMUP_S)
            assert load.poll() is None, f"pgbench exited {load.returncode}"
            observe(Target.from_options(pid=server.pid, comm=None, cgroup=None, command=None), out,
                    duration_s=CAPTURE_S, backend_name=backend, progress=lambda _m: None)
        finally:
            stop_by_pid(load)
    return analyze_capture(out)


def _shown(analysis: Analysis) -> pl.DataFrame:
    """The measured groups: pattern, role, threads, processes, title patterns (printed with -s).
    Every PostgreSQL process is single-threaded (checked), so a group's processes are its threads
    (analysis.threads names a thread's group by pattern only, which title groups share)."""
    assert analysis.threads["upid"].n_unique() == analysis.threads.height, analysis.threads
    groups = analysis.groups.select("pattern", "role", "thread_count",
                                    pl.col("thread_count").alias("processes"), "title_patterns")
    with pl.Config(tbl_cols=-1, tbl_rows=-1, tbl_width_chars=300, fmt_str_lengths=120,
                   fmt_table_cell_list_len=8):
        print(groups)
    return groups


def test_postgres_roles_come_from_titles_and_compile(postmaster: tuple[subprocess.Popen[bytes], int],
                                                      tracer_backend: str, tmp_path: Path) -> None:
    server, port = postmaster
    capture = tmp_path / "postgres.duckdb"
    analysis = _capture(server, port, tracer_backend, capture)
    groups = _shown(analysis)
    assert groups.height >= 3, groups
    titled = {pattern for row in groups.iter_rows(named=True) for pattern in row["title_patterns"]}
    own = [row["title_patterns"] for row in groups.iter_rows(named=True)
           if len(row["title_patterns"]) == 1 and row["title_patterns"][0] in AUXILIARY]
    assert own, (titled, groups)   # an auxiliary process is a role of its own, selected by its title
    assert "postgres: postgres postgres" in titled, groups   # pgbench's backends: their user and db

    profile = tmp_path / "postgres.toml"
    done = tw("synthesize", str(capture), "--name", "postgres", "-o", str(profile))
    assert done.returncode == 0, done.stderr
    text = profile.read_text()
    assert 'title = ["postgres: ' in text, text
    done = tw("validate", str(profile))
    assert done.returncode == 0, done.stdout + done.stderr
    for shape in ("cores=2,threads-per-core=1", "cores=4,threads-per-core=2"):
        done = tw("compile", str(profile), "--shape", shape, "--check", "-o", str(tmp_path / f"{shape}.json"))
        assert done.returncode == 0, (shape, done.stderr, text)
    print(f"postgres ({tracer_backend}): {len(own)} auxiliary role(s) of their own; profile groups:",
          ", ".join(line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("name =")))
