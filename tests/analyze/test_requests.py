"""Request-driven latency evidence (analyze/requests.py) on synthetic captures: who woke a thread,
how irregularly, for how long it ran; and a capture that did not record wake contexts."""

from __future__ import annotations

import random

import polars as pl

from threadwise.analyze import analyze_capture
from threadwise.analyze.requests import MIN_WAKEUPS
from threadwise.observe.builder import CaptureBuilder

US = 1_000
T0 = 1_000_000_000
SECOND = 1_000_000_000
SVC, CLIENT = 500, 900           # the workload's process, a client process on loopback
TASK, SOFTIRQ, HARDIRQ = 0, 1, 2  # tracers/sched.h, enum tw_context


def _serve(cap: CaptureBuilder, tid: int, cpu: int, *, times: list[int], run_ns: int,
           context: int | None, current: int, waker: int = 0) -> None:
    """`tid` woken at each of `times` (in `context`, on top of `current`), runs `run_ns` 5 us later."""
    for t in times:
        cap.waking(t, waker, tid, cpu=cpu, target_cpu=cpu, context=context, current=current)
        cap.slice(tid, cpu, t + 5 * US, run_ns, "S")


def _irregular(rng: random.Random, mean_ns: int, *, until: int, apart_ns: int = 100 * US) -> list[int]:
    """Arrival times of a request stream: exponential gaps (CV ~1), at least `apart_ns` apart."""
    times, t = [], T0 + 1_000 * US
    while True:
        t += apart_ns + int(rng.expovariate(1 / mean_ns))
        if t >= until:
            return times
        times.append(t)


def services(tmp_path, *, recorded: bool = True):
    """A service's threads, each on a CPU of its own (2 s, 8 CPUs):
    - `worker`: requests from a client on loopback (softirqs over the client's thread), at
      irregular times, 30 us each: request-driven;
    - `req-0`, `req-1`: two more such workers, with three idle `req-*` threads beside them;
    - `tick`: its own 10 ms timer (hard interrupts), 50 us each: periodic housekeeping;
    - `beat`: a softirq every 100 ms exactly (a heartbeat from the client, etcd's default pace):
      from outside, but periodic and rare;
    - `loop`: a softirq every 1 ms exactly (a closed-loop client that never pauses): periodic, but
      at a rate no heartbeat runs: request-driven;
    - `crunch`: irregular requests that each take 20 ms: long runs, batch work;
    - `rare`: requests, but fewer than MIN_WAKEUPS of them.
    `recorded=False` writes the same wakeups without their context (a capture before schema 7)."""
    rng = random.Random(11)
    until = T0 + 2 * SECOND - 30_000 * US
    cap = CaptureBuilder(target_tgids=[SVC], duration_ns=2 * SECOND, nr_cpus=8)
    cap.thread(SVC, SVC, "svc")
    client = cap.thread(CLIENT, CLIENT, "client")
    ctx = (lambda c: c) if recorded else (lambda _c: None)
    _serve(cap, cap.thread(501, SVC, "worker"), 0, times=_irregular(rng, 2_000 * US, until=until),
           run_ns=30 * US, context=ctx(SOFTIRQ), current=client)
    for i, (tid, cpu) in enumerate(((502, 1), (503, 6))):
        _serve(cap, cap.thread(tid, SVC, f"req-{i}"), cpu, times=_irregular(rng, 4_000 * US, until=until),
               run_ns=30 * US, context=ctx(SOFTIRQ), current=client)
    for i in range(2, 5):
        cap.thread(502 + i, SVC, f"req-{i}")   # idle: never woken, never ran
    _serve(cap, cap.thread(510, SVC, "tick"), 2, times=list(range(T0 + 5_000 * US, until, 10_000 * US)),
           run_ns=50 * US, context=ctx(HARDIRQ), current=0)
    _serve(cap, cap.thread(511, SVC, "beat"), 3, times=list(range(T0 + 3_000 * US, until, 100_000 * US)),
           run_ns=30 * US, context=ctx(SOFTIRQ), current=client)
    _serve(cap, cap.thread(514, SVC, "loop"), 7, times=list(range(T0 + 500 * US, until, 1_000 * US)),
           run_ns=30 * US, context=ctx(SOFTIRQ), current=client)
    long_runs = _irregular(rng, 40_000 * US, until=until, apart_ns=21_000 * US)
    _serve(cap, cap.thread(512, SVC, "crunch"), 4, times=long_runs, run_ns=20_000 * US, context=ctx(SOFTIRQ),
           current=client)
    few = _irregular(rng, 200_000 * US, until=until)[:MIN_WAKEUPS - 1]
    _serve(cap, cap.thread(513, SVC, "rare"), 5, times=few, run_ns=30 * US, context=ctx(SOFTIRQ),
           current=client)
    return analyze_capture(cap.write(tmp_path / ("recorded.duckdb" if recorded else "old.duckdb")))


def _group(analysis, pattern: str) -> dict:
    [row] = analysis.groups.filter(pl.col("pattern") == pattern).to_dicts()
    return row


def _thread(analysis, name: str) -> dict:
    [row] = analysis.threads.filter(pl.col("name") == name).to_dicts()
    return row


def test_requests_from_outside_irregular_and_short_make_latency_work(tmp_path):
    analysis = services(tmp_path)
    worker = _thread(analysis, "worker")
    assert (worker["known"], worker["from_softirq"], worker["from_own"]) == (worker["wakeups"],) * 2 + (0,)
    assert worker["request_share"] == 1.0 and worker["wake_interval_cv"] > 0.8
    assert worker["request_driven"] == 1.0
    group = _group(analysis, "worker")
    assert not group["in_wake_chain"]   # nothing of the workload wakes it: no chain
    assert group["role"] == "latency" and group["confidence"] > 0.5, group
    evidence = group["request_evidence"]
    assert evidence.startswith("worker 100% of ") and "over client" in evidence, evidence


def test_a_closed_loop_too_frequent_for_a_heartbeat_is_request_driven(tmp_path):
    """As regular as a timer, but 1,000 wakeups/s from outside for short runs: the rate says
    request stream (a busy host's memcached workers read wake CV 0.25-0.5, docs/analyze.md)."""
    analysis = services(tmp_path)
    loop = _thread(analysis, "loop")
    assert loop["request_share"] == 1.0 and loop["wake_interval_cv"] < 0.1, loop
    assert loop["request_driven"] == 1.0
    group = _group(analysis, "loop")
    assert group["role"] == "latency" and group["request_evidence"].startswith("loop 100% of "), group


def test_idle_members_neither_add_nor_dilute_a_groups_evidence(tmp_path):
    analysis = services(tmp_path)
    group = _group(analysis, "req-*")
    assert group["thread_count"] == 5 and group["request_driven"] == 1.0, group
    assert group["role"] == "latency", group


def test_timers_heartbeats_long_runs_and_few_wakeups_are_no_request_evidence(tmp_path):
    analysis = services(tmp_path)
    tick, beat = _thread(analysis, "tick"), _thread(analysis, "beat")
    assert tick["from_hardirq"] == tick["wakeups"] and tick["request_share"] == 0.0
    assert tick["request_driven"] == 0.0 and _group(analysis, "tick")["role"] == "housekeeping"
    # from outside, but at a heartbeat's pace and rhythm: not a request stream
    assert beat["wakeups"] >= MIN_WAKEUPS and beat["request_share"] == 1.0
    assert beat["wake_interval_cv"] < 0.3 and beat["request_driven"] == 0.0
    assert _group(analysis, "beat")["role"] != "latency"
    crunch = _thread(analysis, "crunch")
    assert crunch["request_share"] == 1.0 and crunch["slice_p50_ns"] >= 10_000_000
    assert crunch["request_driven"] == 0.0 and _group(analysis, "crunch")["role"] != "latency"
    rare = _thread(analysis, "rare")
    assert rare["wakeups"] == MIN_WAKEUPS - 1 and rare["request_driven"] == 0.0
    for pattern in ("tick", "beat", "crunch", "rare"):
        assert _group(analysis, pattern)["request_evidence"] is None, pattern


def test_a_capture_without_wake_contexts_says_it_has_no_request_evidence(tmp_path):
    analysis = services(tmp_path, recorded=False)
    worker = _thread(analysis, "worker")
    assert worker["known"] == 0 and worker["request_driven"] is None
    assert _group(analysis, "worker")["request_driven"] is None
    assert any("does not say what woke its threads" in c for c in analysis.caveats), analysis.caveats
    # without the evidence the worker reads as before: woken often, no chain, so not latency
    assert _group(analysis, "worker")["role"] != "latency"
    # the capture that recorded them says nothing of the kind
    assert not any("what woke" in c for c in services(tmp_path).caveats)
