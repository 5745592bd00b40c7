"""Synthetic captures through the real writer: edge cases of the analyze stage."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from threadwise import givenclock
from threadwise.analyze import Analysis, analyze_capture
from threadwise.analyze.model import CONTRACT_SCHEMA
from threadwise.analyze.render import render
from threadwise.analyze.store import load_analysis, store_analysis, stored_version
from threadwise.errors import InputError, UsageError
from threadwise.observe.builder import CaptureBuilder

MS = 1_000_000
T0 = 1_000_000_000


def tw(*args: str) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def _group(analysis: Analysis, pattern: str) -> dict:
    rows = analysis.groups.filter(pl.col("pattern") == pattern).to_dicts()
    assert rows, f"no group {pattern}: {analysis.groups['pattern'].to_list()}"
    return rows[0]


def test_empty_capture(tmp_path):
    path = CaptureBuilder(target_tgids=[100]).write(tmp_path / "empty.duckdb")
    analysis = analyze_capture(path)
    assert analysis.groups.is_empty()
    for column, dtype in CONTRACT_SCHEMA.items():
        assert analysis.groups.schema[column] == dtype, column
    assert any("no target threads" in c for c in analysis.caveats)
    assert "(none)" in render(analysis)
    store_analysis(analysis)
    assert stored_version(path) == 1


def test_thread_with_one_switch_and_an_idle_thread(tmp_path):
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "once")
    cap.slice(101, 0, T0 + 100 * MS, 50_000, "S")
    analysis = analyze_capture(cap.write(tmp_path / "once.duckdb"))
    once = _group(analysis, "once")
    assert once["thread_count"] == 1 and once["slice_p50_ns"] == 50_000
    assert once["cpu_time_ns"] == 50_000
    assert _group(analysis, "app")["cpu_time_ns"] == 0
    assert any("ran only once" in c and "once" in c for c in analysis.caveats)


def test_tid_reuse_gives_two_threads_in_one_group(tmp_path):
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(104, 100, "pool-1", exit_ts=T0 + 500 * MS)
    cap.thread(104, 100, "pool-2", born_ts=T0 + 600 * MS)
    cap.slice(104, 1, T0 + 400 * MS, 100_000)
    cap.slice(104, 1, T0 + 700 * MS, 200_000)
    analysis = analyze_capture(cap.write(tmp_path / "reuse.duckdb"))
    assert analysis.threads.filter(pl.col("tid") == 104).height == 2
    pool = _group(analysis, "pool-*")
    assert pool["thread_count"] == 2 and pool["names"] == ["pool-1", "pool-2"]
    assert pool["match_prefixes"] == ["pool-"]
    assert any("reused" in c for c in analysis.caveats)


def test_fifteen_character_names(tmp_path):
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "server")
    cap.thread(101, 100, "C2 CompilerThre")   # what the kernel keeps of "C2 CompilerThread0"
    cap.thread(102, 100, "C2 CompilerThre")
    cap.thread(103, 100, "C1 CompilerThre")
    for i, (tid, cpu) in enumerate(((101, 0), (102, 1), (103, 0))):
        cap.periodic(tid, cpu, first_ts=T0 + (i + 1) * MS, run_ns=300_000, period_ns=20 * MS, count=40)
    analysis = analyze_capture(cap.write(tmp_path / "long.duckdb"))
    c2 = _group(analysis, "C2 CompilerThre")
    assert c2["thread_count"] == 2
    assert all(len(p) <= 15 for g in analysis.groups["match_prefixes"] for p in g)
    assert c2["match_prefixes"] == ["C2 CompilerThre"] and c2["separable"]
    assert any("15 characters" in c and "C2 CompilerThre" in c for c in analysis.caveats)


def test_lost_events_become_a_caveat(tmp_path):
    cap = CaptureBuilder(target_tgids=[100], events_lost=1234)
    cap.thread(100, 100, "app")
    cap.periodic(100, 0, first_ts=T0 + MS, run_ns=MS, period_ns=10 * MS, count=50)
    analysis = analyze_capture(cap.write(tmp_path / "lost.duckdb"))
    assert analysis.events_lost == 1234
    assert any("1,234 events were lost" in c for c in analysis.caveats)


def _same_name(tmp_path, *, split: bool):
    """A process whose threads never got names: two spinners, four short sleepers (or all alike)."""
    cap = CaptureBuilder(duration_ns=2_000 * MS, target_tgids=[300])
    cap.thread(300, 300, "mariadbd")
    for tid in range(301, 307):
        cap.thread(tid, 300, "mariadbd")
    for i, tid in enumerate((301, 302, 303)):
        if split and tid in (301, 302):   # long runs: 8 ms each, back to back on its own CPU
            for k in range(200):
                cap.slice(tid, tid - 301, T0 + k * 10 * MS, 8 * MS, "R+")
        else:
            cap.periodic(tid, 0, first_ts=T0 + 9 * MS + i * 200_000, run_ns=50_000,
                         period_ns=10 * MS, count=150)
    for tid in (304, 305, 306):
        cap.periodic(tid, 1, first_ts=T0 + 8_500_000 + (tid - 304) * 300_000, run_ns=60_000,
                     period_ns=10 * MS, count=150, waker=303, latency_ns=20_000)
    return analyze_capture(cap.write(tmp_path / f"same-{split}.duckdb"))


def test_all_threads_share_one_name_split_by_behaviour(tmp_path):
    analysis = _same_name(tmp_path, split=True)
    assert not analysis.names_separate_roles
    assert any("names do not separate roles" in c for c in analysis.caveats)
    groups = analysis.groups.filter(pl.col("pattern") == "mariadbd")
    assert groups.height == 2
    assert not any(groups["separable"])
    ranges = sorted(groups["avg_runtime_range_ns"].to_list())
    assert ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == 2**63 - 1
    assert 60_000 < ranges[0][1] < 8 * MS
    long = groups.filter(pl.col("avg_runtime_range_ns").list.first() > 0).row(0, named=True)
    assert long["thread_count"] == 2 and long["role"] == "compute"
    # both groups are `mariadbd`: a thread names its group by row (group_id), the spinners the long one's
    spinners = analysis.threads.filter(pl.col("tid").is_in([301, 302]))
    assert spinners["group"].to_list() == ["mariadbd"] * 2
    assert spinners["group_id"].to_list() == [long["group_id"]] * 2
    assert analysis.threads.group_by("group_id").len().filter(pl.col("group_id").is_not_null()).sort(
        "group_id")["len"].to_list() == analysis.groups.sort("group_id")["thread_count"].to_list()


def test_all_threads_share_one_name_no_split_when_unimodal(tmp_path):
    analysis = _same_name(tmp_path, split=False)
    assert not analysis.names_separate_roles
    assert analysis.groups.filter(pl.col("pattern") == "mariadbd").height == 1
    group = _group(analysis, "mariadbd")
    assert group["avg_runtime_range_ns"] is None
    assert any("no behaviour split" in c for c in analysis.caveats)


def test_cli_json_and_store(tmp_path):
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "hot-0")
    cap.slice(101, 0, T0, 999 * MS, "R+")
    path = cap.write(tmp_path / "cli.duckdb")
    done = tw("analyze", str(path), "--json", "--store")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["analysis_schema_version"] == 1
    assert data["groups"][0]["pattern"] == "hot-*"
    assert set(CONTRACT_SCHEMA) <= set(data["groups"][0])
    assert stored_version(path) == 1
    again = tw("analyze", str(path), "--store")   # a second run replaces the tables
    assert again.returncode == 0, again.stderr
    assert "groups and roles" in again.stdout


def test_errors_have_hints(tmp_path):
    with pytest.raises(UsageError):
        analyze_capture(tmp_path / "missing.duckdb")
    bogus = tmp_path / "bogus.duckdb"
    bogus.write_text("not a database")
    with pytest.raises(InputError):
        analyze_capture(bogus)
    with pytest.raises(InputError):
        analyze_capture(tmp_path)
    done = tw("analyze", str(tmp_path / "missing.duckdb"))
    assert done.returncode == 2
    assert "error:" in done.stderr and "hint:" in done.stderr and "Traceback" not in done.stderr


def test_smt_corunning(tmp_path):
    cap = CaptureBuilder(target_tgids=[100], threads_per_core=2)   # cpus 0, 1: siblings of one core
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "left")
    cap.thread(200, 200, "noisy")
    cap.slice(101, 0, T0 + 10 * MS, 100 * MS)
    cap.slice(200, 1, T0 + 60 * MS, 100 * MS)
    analysis = analyze_capture(cap.write(tmp_path / "smt.duckdb"))
    row = analysis.smt_corun.filter(pl.col("name") == "left").row(0, named=True)
    assert row["other"] == "noisy" and row["corun_ns"] == 50 * MS
    no_smt = CaptureBuilder(target_tgids=[100])
    no_smt.thread(100, 100, "app")
    no_smt.slice(100, 0, T0, MS)
    assert analyze_capture(no_smt.write(tmp_path / "nosmt.duckdb")).smt_corun.is_empty()


def test_prefix_that_also_selects_another_process_is_a_caveat(tmp_path):
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "worker-1")
    cap.thread(200, 200, "other")
    cap.thread(201, 200, "worker-pool")
    cap.slice(101, 0, T0, MS)
    cap.slice(201, 1, T0, MS)
    analysis = analyze_capture(cap.write(tmp_path / "leak.duckdb"))
    worker = _group(analysis, "worker-*")
    assert worker["separable"] and worker["match_prefixes"] == ["worker-"]
    assert "worker-pool" in (worker["note"] or "")
    assert any("worker-pool" in c for c in analysis.caveats)


def test_roles_on_a_synthetic_mix(tmp_path):
    """compute (always runnable), batch (long bursts, sleeps, nobody waits), latency (chain)."""
    cap = CaptureBuilder(duration_ns=2_000 * MS, target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "spin-0")
    cap.thread(102, 100, "crunch")
    cap.thread(103, 100, "dispatch")
    cap.thread(104, 100, "handler-0")
    for k in range(100):                       # spin-0 owns cpu 0, preempted every 20 ms
        cap.slice(101, 0, T0 + k * 20 * MS, 20 * MS - 10_000, "R+")
    for k in range(19):                        # crunch: 50 ms bursts, then sleeps 50 ms (cpu 1)
        cap.slice(102, 1, T0 + k * 100 * MS, 50 * MS, "S")
    for k in range(380):                       # dispatch wakes handler-0 every 5 ms (cpu 1 gaps)
        ts = T0 + (k // 10) * 100 * MS + 51 * MS + (k % 10) * 4_800_000
        cap.slice(103, 1, ts, 20_000, "S")
        cap.waking(ts + 20_000, 103, 104, cpu=1, target_cpu=1)
        cap.slice(104, 1, ts + 40_000, 80_000, "S")
    analysis = analyze_capture(cap.write(tmp_path / "mix.duckdb"))
    roles = dict(zip(analysis.groups["pattern"], analysis.groups["role"], strict=True))
    assert roles["spin-*"] == "compute"
    assert roles["crunch"] == "batch"
    assert roles["handler-*"] == "latency" and roles["dispatch"] == "latency"
    assert roles["app"] == "default"
    assert _group(analysis, "spin-*")["hot_threads"] == 1


def test_families_merge_when_roles_agree(tmp_path):
    cap = CaptureBuilder(duration_ns=2_000 * MS, target_tgids=[100])
    cap.thread(100, 100, "server")
    for tid, name in ((101, "bio_aof_fsync"), (102, "bio_close_file"), (103, "bio_lazy_free"),
                      (104, "pool-reader"), (105, "pool-writer")):
        cap.thread(tid, 100, name)
    cap.periodic(101, 1, first_ts=T0 + 5 * MS, run_ns=200_000, period_ns=100 * MS, count=19)  # idle others
    for k in range(99):                                  # pool-reader spins on cpu 0
        cap.slice(104, 0, T0 + k * 20 * MS, 20 * MS - 10_000, "R+")
    for k in range(300):                                 # pool-writer: short, frequent, woken by server
        ts = T0 + 7 * MS + k * 6 * MS
        if (ts - T0 - 5 * MS) % (100 * MS) < 300_000:
            continue
        cap.slice(100, 1, ts, 20_000, "S")
        cap.waking(ts + 20_000, 100, 105, cpu=1, target_cpu=1)
        cap.slice(105, 1, ts + 30_000, 50_000, "S")
    analysis = analyze_capture(cap.write(tmp_path / "family.duckdb"))
    bio = _group(analysis, "bio_*")
    assert bio["thread_count"] == 3 and bio["match_prefixes"] == ["bio_"]
    patterns = set(analysis.groups["pattern"])
    assert {"pool-reader", "pool-writer"} <= patterns and "pool-*" not in patterns
    assert any("pool-reader, pool-writer look like one family" in c for c in analysis.caveats)


def test_a_merge_that_would_change_the_agreed_role_is_kept_apart(tmp_path):
    """memcached's shape (its real capture did this): two busy `mc-worker` threads woken at
    irregular times by the network (a softirq: no thread is the waker), and idle `mc-*` threads
    (default: no evidence, so they block no merge; here 24, so that the dilution is not marginal).
    Merged, the idle ones dilute the per-thread evidence and the family would read as
    housekeeping: it stays apart."""
    cap = CaptureBuilder(duration_ns=2_000 * MS, target_tgids=[100])
    cap.thread(100, 100, "memcached")
    for tid, name in ((101, "mc-worker"), (102, "mc-worker"), (103, "mc-log"), (104, "mc-lrumaint"),
                      (105, "mc-slabmaint"), (106, "mc-itemcrawler")):
        cap.thread(tid, 100, name)
    for i in range(20):
        cap.thread(200 + i, 100, f"mc-idle-{i}")
    ts = T0 + MS
    for k in range(1_500):   # bursts and gaps: a request stream, not a timer
        gap = (37_000 + 211_000 * (k % 7 == 0) + 13_000 * (k % 3)) * (1 + (k % 11 == 0) * 4)
        worker, cpu = (101, 0) if k % 2 else (102, 1)
        cap.waking(ts + 8_000, 0, worker, cpu=cpu, target_cpu=cpu)
        cap.slice(worker, cpu, ts + 12_000, 10_000, "S")
        ts += gap // 2
        if ts > T0 + 1_990 * MS:
            break
    analysis = analyze_capture(cap.write(tmp_path / "memcached-like.duckdb"))
    patterns = set(analysis.groups["pattern"])
    assert "mc-*" not in patterns and "mc-worker" in patterns
    assert _group(analysis, "mc-worker")["role"] == "latency"
    assert any("look like one family (mc-*) and agree (latency), but merged they would read as" in c
               for c in analysis.caveats), analysis.caveats


def test_stored_analysis_reads_back(tmp_path):
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "worker-1")
    cap.periodic(101, 0, first_ts=T0 + MS, run_ns=100_000, period_ns=10 * MS, count=50, waker=100,
                 latency_ns=5_000)
    path = cap.write(tmp_path / "roundtrip.duckdb")
    assert load_analysis(path) is None
    analysis = analyze_capture(path)
    store_analysis(analysis)
    back = load_analysis(path)
    assert back is not None
    assert back.groups.equals(analysis.groups)
    assert back.caveats == analysis.caveats and back.process_name == analysis.process_name
    assert back.wake_edges.equals(analysis.wake_edges)
