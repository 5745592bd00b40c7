"""Busy-pollers (issue 23): the rule's edges on feature rows, the numbers of real captures, and a
synthetic capture through analyze, the stored tables and the contract record."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from threadwise.analyze import analyze_capture
from threadwise.analyze.contract import (
    POLLER_CPU_PER_WAKEUP_NS,
    POLLER_SHARE,
    AnalysisRecord,
    is_poller,
    poller_text,
)
from threadwise.analyze.render import render
from threadwise.analyze.store import load_analysis, store_analysis
from threadwise.observe.builder import CaptureBuilder

SECOND = 1_000_000_000
MS = 1_000_000


def _poller(cpu_share: float, wakeups_per_s: float, seconds: float = 10.0) -> bool:
    """is_poller on one thread that lived `seconds` at `cpu_share` CPUs, woken `wakeups_per_s`."""
    return bool(is_poller(cpu_share, cpu_share * seconds * SECOND, round(wakeups_per_s * seconds)))


def test_the_rule_at_its_edges() -> None:
    run = POLLER_CPU_PER_WAKEUP_NS
    # on both thresholds: a poller; a hair below either: not
    assert is_poller(POLLER_SHARE, 10 * run, 10)
    assert not is_poller(POLLER_SHARE - 1e-9, 10 * run, 10)
    assert not is_poller(POLLER_SHARE, 10 * run - 1, 10)
    # never woken: a poller exactly when busy (no division by zero wakeups)
    assert is_poller(0.95, 9 * SECOND, 0)
    assert not is_poller(POLLER_SHARE / 2, SECOND // 20, 0)
    # idle and never woken is no poller, nor a thread that never ran
    assert not is_poller(0.0, 0, 0)


@pytest.mark.parametrize(("thread", "cpu_share", "wakeups_per_s", "poller"), [
    # Redis io_thd_1: bpf captures on this host (libbpf, bpftrace; one while the host was loaded),
    # the golden redis-capture, the lab's TCG training capture (docs/analyze.md, "Busy-pollers")
    ("io_thd_1 libbpf", 0.511, 1108.0, True),
    ("io_thd_1 libbpf 2", 0.4554, 604.7, True),
    ("io_thd_1 bpftrace", 0.392, 518.0, True),
    ("io_thd_1 golden", 0.1974, 241.0, True),
    ("io_thd_1 loaded", 0.4467, 15.16, True),
    ("io_thd_1 lab", 0.7144, 16.55, True),
    # wake-driven threads of the same captures
    ("redis-server libbpf", 0.412, 5706.0, False),
    ("redis-server libbpf 2", 0.4659, 5325.0, False),
    ("redis-server golden", 0.1825, 1687.0, False),
    ("worker-0", 0.0165, 157.5, False),
    ("worker-* lab group", 0.0517, 758.3, False),
    ("feeder", 0.0134, 470.9, False),
    ("feeder loaded", 0.0106, 138.1, False),
    ("housekeep", 0.00206, 9.98, False),       # 0.21 ms per wakeup, but 0.002 CPU
    ("bio_aof_fsync", 0.000585, 11.2, False),
    ("JVM writer", 0.0382, 2348.6, False),
    # the main thread busy-waits for its io threads: when they are slow, it is a poller too
    ("redis-server loaded", 0.4031, 89.71, True),
    ("redis-server lab", 0.5119, 545.2, True),
    # busy threads that rarely sleep (compute: they keep the exclusive treatment, synthesize)
    ("hot-0", 0.955, 0.0, True),
    ("hot-0 starved", 0.1852, 0.0, True),
    ("JVM request-2", 0.3642, 2.2, True),
])
def test_the_rule_on_measured_threads(thread: str, cpu_share: float, wakeups_per_s: float,
                                      poller: bool) -> None:
    assert _poller(cpu_share, wakeups_per_s) is poller, thread


def test_the_rule_is_the_same_on_columns_and_floats() -> None:
    rows = pl.DataFrame({"cpu_share": [0.5, 0.5, 0.05, 0.3, 0.1],
                         "cpu_ns": [5 * SECOND, 5 * SECOND, SECOND // 2, 3 * SECOND, SECOND],
                         "wakeups": [10, 100_000, 0, 15_000, 5000]})
    column = rows.select(is_poller(pl.col("cpu_share"), pl.col("cpu_ns"), pl.col("wakeups")))
    assert column.to_series().to_list() == [
        bool(is_poller(*row)) for row in rows.iter_rows()] == [True, False, False, True, True]


def test_poller_text() -> None:
    assert poller_text("io_thd_1", 0.7144, 16.5) == \
        "io_thd_1 0.71 CPU at 16.5 wakeups/s (43 ms of CPU per wakeup)"
    assert poller_text("io_thd_1", 0.511, 1108.0) == \
        "io_thd_1 0.51 CPU at 1.11e+03 wakeups/s (0.46 ms of CPU per wakeup)"
    assert poller_text("hot-0", 0.955, 0.0) == "hot-0 0.95 CPU at 0 wakeups/s (never woken)"


def _capture(path: Path) -> Path:
    """app wakes a poller (10/s, 40 ms of CPU each: 0.4 CPU) and a worker (1000/s, 150 us each:
    0.15 CPU, busy but wake-driven), 2 s on 2 CPUs."""
    cap = CaptureBuilder(target_tgids=[100], duration_ns=2 * SECOND)
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "poll-1")
    cap.thread(102, 100, "worker-1")
    t0 = cap.start_ts + MS
    cap.periodic(101, 1, first_ts=t0, run_ns=40 * MS, period_ns=100 * MS, count=19, waker=100,
                 latency_ns=10_000)
    cap.periodic(102, 0, first_ts=t0, run_ns=150_000, period_ns=MS, count=1990, waker=100,
                 latency_ns=10_000)
    cap.periodic(100, 0, first_ts=t0 + 500_000, run_ns=20_000, period_ns=MS, count=1990)
    return cap.write(path)


def test_analyze_marks_the_poller_and_stores_it(tmp_path: Path) -> None:
    path = _capture(tmp_path / "c.duckdb")
    analysis = analyze_capture(path)
    groups = {r["pattern"]: r for r in analysis.groups.iter_rows(named=True)}
    shown = analysis.groups.select("pattern", "cpu_share", "wakeups_per_s", "poller_threads",
                                   "poller_evidence")
    assert groups["poll-*"]["poller_threads"] == 1, shown
    assert groups["poll-*"]["poller_evidence"] == \
        "poll-1 0.38 CPU at 9.5 wakeups/s (40 ms of CPU per wakeup)", shown
    assert groups["worker-*"]["poller_threads"] == 0 and groups["worker-*"]["poller_evidence"] is None, shown
    assert groups["worker-*"]["cpu_share"] > POLLER_SHARE, shown   # busy, but 0.15 ms per wakeup
    assert groups["app"]["poller_threads"] == 0, shown             # never woken, but 0.02 CPU
    threads = dict(zip(analysis.threads["name"], analysis.threads["poller"], strict=True))
    assert threads == {"app": False, "poll-1": True, "worker-1": False}
    assert "poller in poll-*: poll-1 0.38 CPU" in render(analysis)
    record = {g.pattern: g for g in AnalysisRecord.of(analysis).groups}
    assert record["poll-*"].poller_threads == 1 and record["worker-*"].poller_threads == 0
    # the stored tables hold the same (analysis_groups, analysis_threads)
    copy = shutil.copy(path, tmp_path / "stored.duckdb")
    store_analysis(analysis, copy)
    loaded = load_analysis(copy)
    assert loaded is not None
    assert loaded.groups.select("pattern", "poller_threads", "poller_evidence").sort("pattern").equals(
        analysis.groups.select("pattern", "poller_threads", "poller_evidence").sort("pattern"))
    assert loaded.threads.filter(pl.col("poller"))["name"].to_list() == ["poll-1"]
    assert {g.pattern: g.poller_threads for g in loaded.record().groups} == \
        {g.pattern: g.poller_threads for g in analysis.record().groups}


def test_records_without_the_field_read_as_no_pollers() -> None:
    """A record written before issue 23 (golden fixtures, stored analyses) has no pollers."""
    row = {"pattern": "io_thd_*", "role": "latency", "confidence": 0.9, "match_prefixes": ["io_thd_"],
           "thread_count": 1, "names": ["io_thd_1"], "cpu_time_ns": 1, "cpu_share": 0.7,
           "max_thread_share": 0.7, "hot_threads": 1, "wakeups_per_s": 16.5}
    record = AnalysisRecord.from_dict({"process_name": "redis-server", "duration_ns": SECOND, "nr_cpus": 2,
                                       "groups": [row]})
    assert record.groups[0].poller_threads == 0 and record.groups[0].poller_evidence is None
