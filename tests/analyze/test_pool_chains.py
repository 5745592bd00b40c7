"""Wake chains through pools: a busy pool feeding one consumer is a chain; timer wakeups
that land on busy threads (a capture without interrupt marks) are still not."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from threadwise.analyze import analyze_capture
from threadwise.observe.builder import CaptureBuilder

US = 1_000
T0 = 1_000_000_000
SECOND = 1_000_000_000


def _row(analysis, pattern: str) -> dict:
    [row] = analysis.groups.filter(pl.col("pattern") == pattern).to_dicts()
    return row


def test_busy_pool_feeding_one_consumer_is_a_chain(tmp_path):
    """Three CPU-busy producers round-robin on 2 CPUs, always runnable, preempted; at the end
    of each slice on CPU 0 the producer wakes `sink` (bursty: exponential slice lengths)."""
    rng = random.Random(7)
    cap = CaptureBuilder(target_tgids=[200], duration_ns=2 * SECOND)
    pool = [cap.thread(201 + i, 200, f"pool-{i}") for i in range(3)]
    sink = cap.thread(210, 200, "sink")
    cap.thread(200, 200, "svc")
    t, k = T0, 0
    while t < T0 + 2 * SECOND - 10_000 * US:
        run = int(min(max(rng.expovariate(1 / 600), 30), 6000)) * US
        cap.slice(pool[k % 3], 0, t, run, "R")
        cap.waking(t + run - 2 * US, pool[k % 3], sink, cpu=0, target_cpu=0)
        cap.slice(sink, 0, t + run, 15 * US, "S")
        cap.slice(pool[(k + 1) % 3], 1, t, run + 15 * US, "R")
        t, k = t + run + 15 * US, k + 1
    analysis = analyze_capture(cap.write(tmp_path / "pool.duckdb"))
    edges = analysis.wake_edges.filter(pl.col("wakee") == "sink")
    assert edges.height == 3 and edges["causal"].all(), edges
    assert set(edges["judged_by"].to_list()) == {"pool"}, edges
    # each producer alone looks like a bystander (a third of the wakeups, lift ~1, a spinner)
    assert (edges["share_of_wakee"] < 0.5).all()
    top = analysis.pattern_chains.row(0, named=True)
    assert top["patterns"] == ["pool-*", "sink"] and top["busiest"], analysis.pattern_chains
    assert _row(analysis, "sink")["in_wake_chain"] and _row(analysis, "pool-*")["in_wake_chain"]


def test_timer_wakeups_on_busy_threads_are_not_a_pool_chain(tmp_path):
    """A capture without interrupt marks: `tick` sleeps on a 10 ms timer on CPU 0 and each
    expiry is charged to the spinner that holds CPU 0 then (hot-0 and hot-1 take turns).
    Both members together carry every wakeup, at 100/s, but at the timer's period."""
    cap = CaptureBuilder(target_tgids=[300], duration_ns=2 * SECOND)
    hot = [cap.thread(301, 300, "hot-0"), cap.thread(302, 300, "hot-1")]
    tick = cap.thread(310, 300, "tick")
    cap.thread(300, 300, "svc")
    period = 10_000 * US
    for i in range(199):
        t = T0 + i * period
        on0, on1 = hot[i % 2], hot[(i + 1) % 2]
        cap.slice(on0, 0, t, period - 50 * US, "R")
        cap.waking(t + period - 51 * US, on0, tick, cpu=0, target_cpu=0)
        cap.slice(tick, 0, t + period - 50 * US, 50 * US, "S")
        cap.slice(on1, 1, t, period, "R")
    analysis = analyze_capture(cap.write(tmp_path / "timer.duckdb"))
    edges = analysis.wake_edges.filter(pl.col("wakee") == "tick")
    assert edges.height == 2 and not edges["causal"].any(), edges
    assert _row(analysis, "tick")["wake_interval_cv"] < 0.5
    assert analysis.chains.is_empty() and not _row(analysis, "hot-*")["in_wake_chain"]


def short_lived_capture(directory: Path) -> Path:
    """A service whose tmp-job thread lives 20 ms: it forms no group and is short_lived."""
    cap = CaptureBuilder(target_tgids=[400], duration_ns=2 * SECOND)
    cap.thread(400, 400, "svc")
    cap.thread(401, 400, "loop")
    cap.periodic(401, 0, first_ts=T0 + 1_000 * US, run_ns=200 * US, period_ns=10_000 * US, count=150)
    cap.thread(402, 400, "tmp-job", born_ts=T0 + 500_000 * US, exit_ts=T0 + 520_000 * US)
    cap.slice(402, 1, T0 + 501_000 * US, 5_000 * US, "S")
    return cap.write(directory / "short.duckdb")


def test_short_lived_threads_form_no_group_of_their_own(tmp_path):
    analysis = analyze_capture(short_lived_capture(tmp_path))
    assert "tmp-job" not in analysis.groups["pattern"].to_list(), analysis.groups["pattern"]
    assert "loop" in analysis.groups["pattern"].to_list()
    assert any("lived under 100 ms" in c and "tmp-job" in c for c in analysis.caveats), analysis.caveats
    [row] = analysis.threads.filter(pl.col("name") == "tmp-job").to_dicts()
    assert row["group"] is None
    # the names reach the analysis and its stored record (the catch-all's comment lists them)
    assert analysis.short_lived == ["tmp-job"]
    assert analysis.record().short_lived == ["tmp-job"]
    assert pl.DataFrame(analysis.groups)["thin_evidence"].dtype == pl.String
