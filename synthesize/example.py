"""The sample profile of `threadwise synthesize --example`.

It is built the same way a real one is: from an analysis (here a hand-written
one of a server with named threads, numbers of the kind a 10 s capture on 4
CPUs gives), so it shows every treatment, the evidence comments and the
request-based sizing arithmetic.
"""

from __future__ import annotations

from threadwise.analyze.contract import AnalysisRecord, GroupRow
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.schema import Profile

EXAMPLE_ANALYSIS = AnalysisRecord(
    process_name="demo-server",
    duration_ns=10_000_000_000,
    nr_cpus=4,
    events_lost=0,
    caveats=["hand-written example analysis, not a capture"],
    groups=[
        GroupRow(pattern="worker-*", role="compute", confidence=0.92,
                 match_prefixes=["worker-"], thread_count=2, names=["worker-0", "worker-1"],
                 cpu_time_ns=19_400_000_000, cpu_share=1.94, max_thread_share=0.98,
                 hot_threads=2, wakeups_per_s=40.0, slice_p50_ns=3_900_000,
                 slice_p99_ns=4_000_000, rq_latency_p50_ns=20_000,
                 rq_latency_p99_ns=1_800_000),
        GroupRow(pattern="io_thd_*", role="latency", confidence=0.81,
                 match_prefixes=["io_thd_"], thread_count=2, names=["io_thd_1", "io_thd_2"],
                 cpu_time_ns=2_100_000_000, cpu_share=0.21, max_thread_share=0.11,
                 hot_threads=0, wakeups_per_s=18_500.0, slice_p50_ns=12_000,
                 slice_p99_ns=90_000, rq_latency_p50_ns=8_000, rq_latency_p99_ns=310_000,
                 in_wake_chain=True),
        GroupRow(pattern="bio_*", role="housekeeping", confidence=0.9,
                 match_prefixes=["bio_"], thread_count=3,
                 names=["bio_close_file", "bio_aof_fsync", "bio_lazy_free"],
                 cpu_time_ns=30_000_000, cpu_share=0.003, max_thread_share=0.002,
                 hot_threads=0, wakeups_per_s=12.0),
        GroupRow(pattern="compactor", role="batch", confidence=0.7,
                 match_prefixes=["compactor"], thread_count=1, names=["compactor"],
                 cpu_time_ns=3_000_000_000, cpu_share=0.3, max_thread_share=0.3,
                 hot_threads=0, wakeups_per_s=2.0, slice_p50_ns=20_000_000,
                 slice_p99_ns=40_000_000),
    ],
)
EXAMPLE_REQUESTS = {"worker-*": 2250}


def example_profile(name: str = "example") -> Profile:
    """A valid sample profile (deterministic)."""
    return build_profile(EXAMPLE_ANALYSIS, name, requests=EXAMPLE_REQUESTS)
