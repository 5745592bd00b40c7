"""bpf tier: roles from process titles on a real PostgreSQL 15 under pgbench (issue 52,
docs/analyze.md "Roles from process titles").

Every PostgreSQL process has comm `postgres` and runs as user `postgres`, so neither names nor
users tell its roles apart; only the titles the processes write over their argv do
(`postgres: checkpointer`, `postgres: walwriter`, `postgres: USER DB HOST(PORT) STATE`). The test
runs its own server (tests/pgserve.py: a fresh data directory, the postmaster as `postgres` on
127.0.0.1 and a free port), `pgbench -i` then `pgbench -c 2 -j 1` on 127.0.0.1
while `observe` captures the postmaster's process tree for CAPTURE_S (per tracer backend). The
server and its load run at nice -10 (NICE_WORKLOAD, set before the user is dropped), as the
other ground-truth captures do. Everything stops by PID: pgbench by SIGTERM, the postmaster by
SIGINT (PostgreSQL's fast shutdown); never by name.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests import pgserve
from tests.conftest import NICE_WORKLOAD, alone_with_labs, stop_by_pid
from threadwise import givenclock
from threadwise.analyze import analyze_capture
from threadwise.analyze.model import Analysis
from threadwise.observe.capture import observe
from threadwise.observe.target import Target

pytestmark = [pytest.mark.bpf, pytest.mark.scx, pytest.mark.timeout(1800)]

CAPTURE_S = 6.0
WARMUP_S = 2.0
LOAD_S = 120          # pgbench -T: longer than any capture; stopped by PID once the capture ends


def tw(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture
def postmaster() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A fresh PostgreSQL 15 on 127.0.0.1 (tests/pgserve.py), at nice -10 like the other
    ground-truth workloads; its postmaster and port."""
    reason = pgserve.missing()
    if reason:
        pytest.skip(reason)
    with pgserve.serving(NICE_WORKLOAD) as served:
        yield served


def _capture(server: subprocess.Popen[bytes], port: int, backend: str, out: Path) -> Analysis:
    """pgbench's tables, then its load on 2 connections while `observe` traces the postmaster's
    process tree for CAPTURE_S; analyzed."""
    pgserve.initialize(port, NICE_WORKLOAD)
    with alone_with_labs(f"postgres capture ({backend})"):
        bench = pgserve.pgbench(port, "-c", "2", "-j", "1", "-T", str(LOAD_S), prefix=NICE_WORKLOAD)
        load = subprocess.Popen(bench, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
           if len(row["title_patterns"]) == 1 and row["title_patterns"][0] in pgserve.AUXILIARY]
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
