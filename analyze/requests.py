"""Request-driven latency evidence: threads woken by requests from outside their workload.

Problem: a thread that serves requests from the network (memcached's `mc-worker`, MariaDB's
connection threads) is woken by the packet, not by another thread of its workload, so the
capture shows it in no wake chain, the role model's strongest latency evidence. Such threads
read as housekeeping or batch, and the profile built on that lost to the default scheduler
(docs/bundled-workloads.md, "memcached" and "MariaDB").
Approach: the tracer records the context of every wakeup and the task on the CPU (schema
migration 7; wake_sources.sql classes them). Per thread, three pieces of evidence, each 0..1,
multiplied into `request_driven`:
- woken by requests: the share of its wakeups (with a recorded context) that came from a softirq
  or from a thread of another process. On loopback a request's softirq runs on the sending
  client's thread (memcached's workers: 99.8% from softirqs over `mcload`), behind a NIC on
  whatever ran; a kernel thread that handles packets (ksoftirqd, threaded NAPI) is another
  process's thread. Hard interrupts are left out: on these hosts they are the thread's own
  timers expiring (hrtimer), not work sent to it: memcached's `mc-lrumaint`, which sleeps on an
  adaptive timer, had 99% of 1,507 wakeups from hard interrupts with a wake CV of 0.84.
- a stream, not a heartbeat: irregular in time, or too frequent for a heartbeat, whichever says
  more. `wake_interval_cv` (the lower of the CVs of the gaps between wakeups and of the sleeps
  they end; thread_features.sql) counts 0 up to PERIODIC_CV and 1 from IRREGULAR_CV, linear
  between. Measured here (docs/analyze.md, "Woken by requests"): timers read 0.19 (rolesim's
  feeder, nanosleep 2 ms, quiet host) and a single closed-loop client pausing a fixed 10 ms
  between requests 0.21; memcached with one mcload connection per worker 0.37, two per worker
  0.69-1.83 on a quiet host but 0.25-0.5 on a busy one (a closed loop on saturated CPUs paces
  itself), MariaDB's connection threads under sysbench 2-4. So regularity alone cannot tell a
  busy request worker from a heartbeat; its rate can: heartbeats and keepalives run at tens per
  second at most (etcd's default heartbeat is 10/s), memcached's workers take 400-500 requests/s
  each on a busy host. The wakeup rate over the thread's life counts 0 up to HEARTBEAT_PER_S and
  1 from STREAM_PER_S, log-linear between (the 10-ms closed loop, 100/s: 0.7).
- short runs: slice p50 up to SHORT_RUN_NS counts fully, nothing from LONG_RUN_NS, log-linear
  between; a thread that computes for long after each request is batch work, whoever sent it.
A thread with fewer than MIN_WAKEUPS wakeups has no evidence (0); one whose wakeups have no
recorded context (an older capture, an imported trace) has none either (NULL), and the
analysis says so in a caveat. A group's `request_driven` is the mean of its threads' weighted
by their wakeups (NULL when no thread's context is known), so idle members neither add nor
dilute it. The role model reads max(in_wake_chain, request_driven) as its latency evidence
(roles.py).
"""

from __future__ import annotations

import math

import polars as pl

PERIODIC_CV = 0.2          # wake CV at or below this: periodic, no request evidence
IRREGULAR_CV = 0.4         # at or above: irregular, full evidence
HEARTBEAT_PER_S = 20.0     # wakeups/s at or below this: a heartbeat's pace, no evidence from the rate
STREAM_PER_S = 200.0       # at or above: a request stream whatever its rhythm, full evidence
SHORT_RUN_NS = 1_000_000   # slice p50 up to this: short runs
LONG_RUN_NS = 10_000_000   # from this: long runs, no request evidence
MIN_WAKEUPS = 10           # fewer wakeups: nothing to judge (groups.MIN_WAKEUPS)
SOURCE_COLUMNS = ("known", "from_own", "from_other", "from_idle", "from_softirq", "from_hardirq")


def _ramp(value: pl.Expr, low: float, high: float) -> pl.Expr:
    """0 at or below `low`, 1 at or above `high`, linear between."""
    return ((value - low) / (high - low)).clip(0.0, 1.0)


def with_request_evidence(threads: pl.DataFrame, sources: pl.DataFrame) -> pl.DataFrame:
    """threads (thread_features.sql) joined with wake_sources.sql, plus `request_share` (share of
    known wakeups from a softirq or another process) and `request_driven` (0..1; module note)."""
    t = threads.join(sources, on="utid", how="left").with_columns(
        [pl.col(c).fill_null(0) for c in SOURCE_COLUMNS])
    known = pl.col("known").cast(pl.Float64)
    share = pl.when(known > 0).then((pl.col("from_softirq") + pl.col("from_other")) / known)
    irregular = _ramp(pl.col("wake_interval_cv").fill_null(0.0), PERIODIC_CV, IRREGULAR_CV)
    per_s = pl.col("wakeups_per_s").cast(pl.Float64).clip(lower_bound=1e-9)   # wakeups / life
    frequent = _ramp(per_s.log10(), math.log10(HEARTBEAT_PER_S), math.log10(STREAM_PER_S))
    stream = pl.max_horizontal(irregular, frequent.fill_null(0.0))
    slice_ns = pl.col("slice_p50_ns").cast(pl.Float64).fill_null(float(LONG_RUN_NS)).clip(lower_bound=1.0)
    short = 1.0 - _ramp(slice_ns.log10(), math.log10(SHORT_RUN_NS), math.log10(LONG_RUN_NS))
    driven = pl.when(known <= 0).then(None).when(pl.col("wakeups") < MIN_WAKEUPS).then(0.0) \
        .otherwise(share * stream * short)
    return t.with_columns(request_share=share, request_driven=driven.round(4))


def group_request_driven() -> pl.Expr:
    """A group's request evidence: its threads' `request_driven` weighted by their wakeups
    (NULL when no thread's wake context is known)."""
    known = pl.col("request_driven").is_not_null()
    weight = pl.when(known).then(pl.col("wakeups").cast(pl.Float64)).otherwise(0.0)
    total = weight.sum()
    return pl.when(known.any()).then(
        pl.when(total > 0).then((pl.col("request_driven").fill_null(0.0) * weight).sum() / total)
        .otherwise(0.0))


def request_text(row: dict) -> str:
    """A thread's request evidence in words: `mc-worker 99.8% of 911 wakeups from softirqs or
    other processes (most often over mcload), wake CV 1.83, 152 wakeups/s, slice p50 22 us`."""
    share = float(row["request_share"] or 0.0)
    over = f" (most often over {row['request_source']})" if row.get("request_source") else ""
    cv = row.get("wake_interval_cv")
    slice_ns = row.get("slice_p50_ns")
    parts = [f"{row['name'] or '?'} {100 * share:.3g}% of {int(row['known']):,} wakeups from softirqs or "
             f"other processes{over}"]
    parts.append(f"wake CV {cv:.2f}" if cv is not None else "wake CV unknown")
    if row.get("wakeups_per_s") is not None:
        parts.append(f"{row['wakeups_per_s']:,.0f} wakeups/s")
    if slice_ns is not None:
        parts.append(f"slice p50 {slice_ns / 1e3:.0f} us")
    return ", ".join(parts)


def group_evidence(threads: pl.DataFrame) -> dict[str, str]:
    """pattern -> its most request-driven thread in words (request_text), for groups with one
    whose evidence counts (`request_driven` >= 0.5)."""
    best = (threads.filter(pl.col("request_driven") >= 0.5)
            .sort(["request_driven", "wakeups", "utid"], descending=[True, True, False])
            .group_by("pattern", maintain_order=True).first())
    return {r["pattern"]: request_text(r) for r in best.iter_rows(named=True)}


def missing_context_caveat(threads: pl.DataFrame) -> str | None:
    """What the analysis cannot see when the capture did not record wake contexts."""
    woken = threads.filter(pl.col("wakeups") > 0)
    if woken.is_empty() or woken["known"].fill_null(0).sum() > 0:
        return None
    return ("the capture does not say what woke its threads (recorded before capture schema 7, or "
            "imported from perf or Perfetto): no request-driven latency evidence, so a thread woken "
            "from the network reads as latency only in a wake chain")
