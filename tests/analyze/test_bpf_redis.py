"""bpf tier: analyze a live Redis (our own server on loopback, stopped by its PID)."""

from __future__ import annotations

from itertools import pairwise

import polars as pl
import pytest

from threadwise.analyze import analyze_capture

pytestmark = pytest.mark.bpf


@pytest.fixture(scope="module")
def redis_analysis(redis_capture):
    """The shared live Redis capture (tests/conftest.py), analyzed."""
    return analyze_capture(redis_capture)


def test_redis_groups(redis_analysis):
    groups = {row["pattern"]: row for row in redis_analysis.groups.iter_rows(named=True)}
    assert redis_analysis.process_name == "redis-server"
    for pattern, prefix in (("redis-server", "redis-server"), ("io_thd_*", "io_thd_"), ("bio_*", "bio_"),
                            ("jemalloc_bg_thd", "jemalloc_bg_thd")):
        assert pattern in groups, f"{pattern} missing: {sorted(groups)}"
        assert groups[pattern]["match_prefixes"] == [prefix]
        assert groups[pattern]["separable"]
    assert groups["bio_*"]["thread_count"] == 3
    assert groups["redis-server"]["in_wake_chain"]


def test_main_thread_wakes_the_io_threads(redis_analysis):
    edges = redis_analysis.wake_edges.filter(pl.col("causal"))
    main_to_io = edges.filter((pl.col("waker") == "redis-server")
                              & pl.col("wakee").str.starts_with("io_thd_"))
    assert main_to_io.height >= 1, edges.select("waker", "wakee", "wakeups", "lift")
    assert main_to_io["wakeups"].sum() > 10
    chains = redis_analysis.pattern_chains
    assert any(("redis-server", "io_thd_*") in pairwise(p)
               for p in chains["patterns"].to_list())
