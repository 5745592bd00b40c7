"""bpf tier: ground truth on a live capture of the bundled workload (rolesim).

Assertions are relative (roles, chains, orderings), not absolute CPU figures:
another VM may steal CPU on this host at any time.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from threadwise import givenclock
from threadwise.analyze import analyze_capture
from threadwise.analyze.contract import POLLER_SHARE
from threadwise.analyze.store import stored_version
from threadwise.refine.measure.bundled import ROLESIM_ROLES
from threadwise.synthesize.build import build_profile, from_analysis
from threadwise.synthesize.schema import Treatment
from threadwise.synthesize.writer import dumps

pytestmark = pytest.mark.bpf


@pytest.fixture(scope="module")
def rolesim(rolesim_capture):
    """The shared live capture (tests/conftest.py) and its analysis."""
    return rolesim_capture, analyze_capture(rolesim_capture)


def _by_pattern(analysis):
    return {row["pattern"]: row for row in analysis.groups.iter_rows(named=True)}


def test_roles_match_the_ground_truth(rolesim):
    _, analysis = rolesim
    groups = _by_pattern(analysis)
    for pattern, role in ROLESIM_ROLES.items():
        assert pattern in groups, f"{pattern} missing: {sorted(groups)}"
        assert groups[pattern]["role"] == role, (pattern, groups[pattern])
        assert groups[pattern]["confidence"] > 0.5
    assert groups["hot-*"]["thread_count"] == 2 and groups["worker-*"]["thread_count"] == 3


def test_feeder_and_workers_form_the_busiest_chain(rolesim):
    _, analysis = rolesim
    groups = _by_pattern(analysis)
    evidence = (analysis.groups.select("pattern", "role", "in_wake_chain"), analysis.pattern_chains,
                analysis.wake_edges.filter(pl.col("causal")).select("waker", "wakee", "wakeups", "lift"))
    assert groups["feeder"]["in_wake_chain"] and groups["worker-*"]["in_wake_chain"], evidence
    assert not groups["hot-*"]["in_wake_chain"] and not groups["housekeep"]["in_wake_chain"], evidence
    top = analysis.pattern_chains.row(0, named=True)
    assert top["patterns"] == ["feeder", "worker-*"] and top["busiest"], evidence
    edges = analysis.wake_edges.filter(pl.col("causal") & (pl.col("waker") == "feeder"))
    assert sorted(edges["wakee"].to_list()) == ["worker-0", "worker-1", "worker-2"], evidence


def test_relative_evidence(rolesim):
    _, analysis = rolesim
    g = _by_pattern(analysis)
    # spinners are always runnable, however much CPU another VM steals
    assert g["hot-*"]["demand"] > 0.9 and g["hot-*"]["involuntary_frac"] > 0.8
    assert g["hot-*"]["cpu_share"] > 5 * g["feeder"]["cpu_share"]
    assert g["hot-*"]["slice_p99_ns"] > g["worker-*"]["slice_p99_ns"]
    # workers are woken about as often as the feeder wakes them; housekeep about 10/s
    assert g["worker-*"]["wakeups_per_s"] > 10 * g["housekeep"]["wakeups_per_s"]
    assert 3 < g["housekeep"]["wakeups_per_s"] < 30
    assert g["housekeep"]["wake_interval_cv"] < 0.3


def test_no_latency_thread_is_a_poller(rolesim):
    """Issue 23: the wake-driven threads (feeder, workers) run briefly per wakeup, so they are no
    pollers and keep the latency treatment; the spinners (hot-*) are busy and never woken, pollers
    by the rule, and keep their exclusive cores."""
    _, analysis = rolesim
    threads = analysis.threads.select("name", "group", "cpu_share", "wakeups_per_s", "cpu_ns", "wakeups",
                                      "poller")
    print(threads)   # the measured values, for the record
    latency = [p for p, role in ROLESIM_ROLES.items() if role == "latency"]
    woken = threads.filter(pl.col("group").is_in(latency))
    assert woken.height == 4 and not woken["poller"].any(), threads
    groups = _by_pattern(analysis)
    assert all(groups[p]["poller_threads"] == 0 for p in latency), threads
    spinners = threads.filter(pl.col("group") == "hot-*")
    busy = spinners.filter(pl.col("cpu_share") >= POLLER_SHARE)   # all of them, unless starved
    assert busy["poller"].all() and groups["hot-*"]["poller_threads"] == busy.height, threads
    # the poller rule changes no treatment of rolesim: the profile is the one without it
    record = from_analysis(analysis)
    plain = replace(record, groups=[replace(g, poller_threads=0, poller_evidence=None)
                                    for g in record.groups])
    profile = build_profile(record, "rolesim")
    assert dumps(profile) == dumps(build_profile(plain, "rolesim"))
    by_pattern = {m: g for g in profile.groups for m in g.match}
    # the spinners keep exclusive cores whenever they are hot (a busy host may starve them below)
    if groups["hot-*"]["hot_threads"] >= 1:
        assert by_pattern["hot-*"].treatment is Treatment.EXCLUSIVE, dumps(profile)
    assert by_pattern["hot-*"].preempt is None and "poller" not in (by_pattern["hot-*"].comment or "")
    for pattern in latency:
        assert by_pattern[pattern].treatment is Treatment.LATENCY, pattern
        assert by_pattern[pattern].preempt is None and "poller" not in (by_pattern[pattern].comment or "")


def test_prefixes_select_exactly_the_groups(rolesim):
    _, analysis = rolesim
    threads = analysis.threads
    for row in analysis.groups.iter_rows(named=True):
        assert row["separable"], row
        selected = threads.filter(
            pl.any_horizontal([pl.col("name").str.starts_with(p) for p in row["match_prefixes"]])
            & ~pl.any_horizontal([pl.col("name").str.starts_with(e) for e in row["exclude_prefixes"]]
                                 or [pl.lit(False)]))
        assert sorted(selected["name"].to_list()) == sorted(
            threads.filter(pl.col("group") == row["pattern"])["name"].to_list()), row["pattern"]
    groups = _by_pattern(analysis)
    assert groups["hot-*"]["match_prefixes"] == ["hot-"]
    assert groups["worker-*"]["match_prefixes"] == ["worker-"]


def test_cli_stores_the_analysis(rolesim, tmp_path):
    import shutil
    import sys

    path, _ = rolesim
    copy = tmp_path / "copy.duckdb"
    shutil.copy(path, copy)
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "analyze", str(copy), "--store"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "feeder -> worker-*" in done.stdout
    assert stored_version(copy) == 1
