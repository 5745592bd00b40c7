"""bpf tier: threads woken by requests from the network get the request-driven evidence and a
latency role (analyze/requests.py, docs/analyze.md "Woken by requests").

Real services on loopback, from their bundled workload files, run the way train observes them
(refine/measure/service.py: the service in its own process group, prepared, its load generator
looping; both stopped by PID, never by name), on free ports:
- memcached under the bundled mcload (refine/workloads/memcached.toml): its `mc-worker` threads;
- MariaDB under sysbench oltp_read_write (refine/workloads/mariadb.toml): its connection threads,
  which carry the process's own name, `mariadbd`, like every other thread of it.
Each capture takes the host's turn (no lab VM boots beside it) and runs the service and its load
at nice -10, as the other ground-truth captures do (tests/conftest.py): the tests are about what
analyze makes of a service at work, not of one starved.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import NICE_WORKLOAD, _free_port, alone_with_labs
from threadwise.analyze import analyze_capture
from threadwise.analyze.model import Analysis
from threadwise.analyze.requests import IRREGULAR_CV, MIN_WAKEUPS, STREAM_PER_S
from threadwise.observe.capture import observe
from threadwise.observe.target import Target
from threadwise.refine.measure.service import RunningService
from threadwise.refine.measure.workload import bundled_workload_path, parse_workload

pytestmark = [pytest.mark.bpf, pytest.mark.timeout(1800)]

CAPTURE_S = 6.0
SHOWN = ("utid", "name", "wakeups", "known", "from_own", "from_other", "from_softirq", "from_hardirq",
         "request_source", "wake_interval_cv", "wakeups_per_s", "slice_p50_ns", "request_driven", "group",
         "group_id")


def _niced(text: str) -> str:
    """The workload file with its service's and its load's commands run at nice -10 (nice execs
    the command, so the service's pid is the service's)."""
    prefix = ", ".join(f'"{word}"' for word in NICE_WORKLOAD)
    service, table, load = text.partition("[load]")
    return table.join(part.replace("\ncommand = [", f"\ncommand = [{prefix}, ", 1)
                      for part in (service, load))


def _capture(name: str, port: str, backend: str, work: Path) -> Analysis:
    """The bundled workload `name` on a free port (its file names `port`), observed under its own
    load for CAPTURE_S, analyzed."""
    text = bundled_workload_path(name).read_text().replace(port, str(_free_port()))
    text = _niced(text)
    workload = parse_workload(text, f"{name}.toml")
    out = work / f"{name}.duckdb"
    with alone_with_labs(f"{name} capture ({backend})"), RunningService(workload, work) as service:
        service.start_load()
        time.sleep(workload.objective.warmup_s)
        observe(Target.from_options(pid=service.pid, comm=None, cgroup=None, command=None), out,
                duration_s=CAPTURE_S, backend_name=backend, progress=lambda _m: None)
    return analyze_capture(out)


@pytest.fixture(scope="module")
def memcached(tmp_path_factory: pytest.TempPathFactory, tracer_backend: str) -> Analysis:
    if shutil.which("memcached") is None:
        pytest.skip("needs memcached: run scripts/setup-system.sh")
    return _capture("memcached", "11299", tracer_backend, tmp_path_factory.mktemp(f"mc-{tracer_backend}"))


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory, tracer_backend: str) -> Analysis:
    if not Path("/usr/sbin/mariadbd").is_file() or shutil.which("sysbench") is None:
        pytest.skip("needs mariadb-server and sysbench: run scripts/setup-system.sh")
    return _capture("mariadb", "3399", tracer_backend, tmp_path_factory.mktemp(f"my-{tracer_backend}"))


def _woken(analysis: Analysis) -> pl.DataFrame:
    threads = analysis.threads.filter(pl.col("wakeups") >= MIN_WAKEUPS).select(SHOWN)
    with pl.Config(tbl_cols=-1, tbl_width_chars=400, fmt_str_lengths=200):   # the measured values, whole
        print(threads)
        print(analysis.groups.select("group_id", "pattern", "avg_runtime_range_ns", "role", "confidence",
                                     "thread_count", "request_driven", "in_wake_chain", "request_evidence"))
    return threads


IDLE = "(idle)"   # wake_sources.sql: the softirq ran while the CPU was idle


def _request_driven(threads: pl.DataFrame, client: str) -> None:
    """Woken from the network, thread by thread: the context is recorded, and a softirq or the
    client itself woke each of them. That is the ground truth. On loopback the softirq that
    delivers a request runs on the client's thread, or, on a CPU that was idle, in the idle task:
    so the process most often on the CPU then is the client or `(idle)` (a quiet host, 2026-12-06:
    one of MariaDB's two connection threads read `(idle)`), and the client for one at least.
    How regular one thread's wake-ups are is not ground truth either: it depends on the
    connections it got and on the host. On a busy host (a fresh clone's make test, 2026-12-06)
    one of memcached's two workers read a wake CV of 0.215 and the other 0.497. A thread that is
    irregular or takes a stream's rate must carry the whole evidence (requests.py), at least one
    thread must be such, and the group the evidence of its threads together (`_roles_of`)."""
    assert (threads["known"] == threads["wakeups"]).all(), threads
    assert threads["request_source"].is_in([client, IDLE]).all(), threads
    assert (threads["request_source"] == client).any(), threads
    assert ((threads["from_softirq"] + threads["from_other"]) >= 0.9 * threads["known"]).all(), threads
    streams = threads.filter((pl.col("wake_interval_cv") >= IRREGULAR_CV)
                             | (pl.col("wakeups_per_s") >= STREAM_PER_S))
    assert streams.height >= 1 and (streams["request_driven"] >= 0.5).all(), threads


def _roles_of(analysis: Analysis, threads: pl.DataFrame) -> dict[int, tuple[str, float, str | None]]:
    """Each group of `threads`, by its row (`group_id`: a behaviour split gives MariaDB two groups
    named `mariadbd`, one of short runs and one of long, and the connection threads sit in one of
    them): its role, confidence and request evidence in words; its threads' request evidence
    together (weighted by their wakeups) must count."""
    groups = {r["group_id"]: r for r in analysis.groups.iter_rows(named=True)}
    ours = set(threads["group_id"].to_list())
    brief = [{k: groups[g][k] for k in ("group_id", "pattern", "avg_runtime_range_ns", "role", "confidence",
                                        "thread_count", "request_driven")} for g in ours]
    assert all((groups[g]["request_driven"] or 0.0) >= 0.5 for g in ours), brief
    return {g: (groups[g]["role"], groups[g]["confidence"], groups[g]["request_evidence"]) for g in ours}


def test_memcached_workers_are_woken_by_requests_and_read_as_latency(memcached):
    threads = _woken(memcached)
    workers = threads.filter(pl.col("name") == "mc-worker")
    assert workers.height >= 1, threads   # -t 2: the busy ones (mcload's 4 connections on 2 workers)
    _request_driven(workers, "mcload")
    for group, (role, confidence, evidence) in _roles_of(memcached, workers).items():
        assert role == "latency" and confidence > 0.5, (group, role, confidence)
        assert evidence is not None and evidence.startswith("mc-worker ") and (
            "over mcload" in evidence or f"over {IDLE}" in evidence), evidence
    # memcached's LRU maintainer sleeps on its own timer: hard interrupts, no request evidence
    for row in threads.filter(pl.col("name") == "mc-lrumaint").iter_rows(named=True):
        assert row["from_hardirq"] >= 0.9 * row["known"] and row["request_driven"] < 0.5, row


def test_mariadb_connection_threads_are_woken_by_requests_and_read_as_latency(mariadb):
    threads = _woken(mariadb)
    # every thread is `mariadbd`. sysbench --threads=2: two connections, two connection threads,
    # which its requests wake far more often than anything else wakes a thread of the server
    # (20,479 and 14,168 wakeups in 6 s, then 167: a quiet host, 2026-12-06)
    connections = threads.sort(["wakeups", "utid"], descending=[True, False]).head(2)
    assert connections["wakeups"].min() >= 5 * threads["wakeups"].sort(descending=True)[2], threads
    _request_driven(connections, "sysbench")
    for group, (role, confidence, evidence) in _roles_of(mariadb, connections).items():
        assert role == "latency" and confidence > 0.5, (group, role, confidence)
        assert evidence is not None and ("over sysbench" in evidence or f"over {IDLE}" in evidence), evidence
