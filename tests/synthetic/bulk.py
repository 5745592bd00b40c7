"""Bulk synthetic captures for the benchmarks and the tests (notebooks, interop): millions of events.

Problem: `benchmarks/analyze_10m.py` needs a capture of 10 million
sched_switch events with a realistic mix of threads, generated in seconds,
written exactly as a live capture is (observe's builder: the raw tables'
Arrow schemas, the typed metadata rows, finalize.sql).
Approach: whole-array numpy, no per-event Python. Threads are pinned
round-robin to CPUs and run back to back, never the same thread twice in a row
on a CPU; a slice ends asleep with its class's probability, and every sleep
gap gets a waking from the class's waker. Batches stream into the open
capture (`CaptureBuilder.open`), so the events never sit in memory twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from threadwise.observe.builder import NORMAL_PRIO, PREEMPTED, SLEEPING, CaptureBuilder

BULK_TGID = 5000
OTHER_TGID = 9000
# (pattern, count, mean slice ns, probability a slice ends in sleep, waker class index or -1)
BULK_CLASSES = (("bulkapp", 1, 50_000, 0.9, -1), ("hot-{}", 4, 3_000_000, 0.02, -1),
                ("worker-{}", 16, 80_000, 0.9, 3), ("feeder", 1, 20_000, 0.95, -1),
                ("housekeep", 1, 200_000, 0.98, -1), ("io_thd_{}", 8, 40_000, 0.8, 0),
                ("other-{}", 40, 500_000, 0.5, -1))


def bulk_threads() -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """tid, comm, tgid, mean slice, sleep probability, waker tid of every generated thread."""
    tids, comms, tgids, means, sleeps, wakers = [], [], [], [], [], []
    first_tid: dict[int, int] = {}
    tid = BULK_TGID
    for index, (pattern, count, mean, sleep, waker) in enumerate(BULK_CLASSES):
        first_tid[index] = tid
        for n in range(count):
            tids.append(tid)
            comms.append(pattern.format(n))
            tgids.append(BULK_TGID if not pattern.startswith("other") else OTHER_TGID)
            means.append(mean)
            sleeps.append(sleep)
            wakers.append(waker)
            tid += 1
    waker_tid = np.array([first_tid[w] if w >= 0 else 0 for w in wakers], dtype=np.int32)
    return (np.array(tids, np.int32), comms, np.array(tgids, np.int32), np.array(means, np.float64),
            np.array(sleeps, np.float64), waker_tid)


def bulk_capture(path: Path, *, switches: int = 10_000_000, nr_cpus: int = 2, seed: int = 0,
                 batch: int = 2_000_000, timings: dict[str, float] | None = None) -> Path:
    """A capture with `switches` sched_switch events: threads pinned round-robin to CPUs.

    `timings`, when given, receives `ingest_s` (generate + append raw batches) and
    `finalize_s` (the metadata, observe's finalize.sql and the rename).
    """
    began = time.monotonic()
    rng = np.random.default_rng(seed)
    tids, comms, tgids, means, sleeps, wakers = bulk_threads()
    n_threads = len(tids)
    per_cpu = switches // nr_cpus
    builder = CaptureBuilder(start_ts=1_000_000_000, duration_ns=0, nr_cpus=nr_cpus,
                             target_tgids=[BULK_TGID])
    for tid, comm, tgid in zip(tids, comms, tgids, strict=True):
        builder.thread(int(tid), int(tgid), comm)   # seen at the start; alive targets get end snapshots
    finalizing = began
    with builder.open(path) as writer:
        all_starts, all_ends, all_idx, all_state = [], [], [], []
        end_ts = builder.start_ts
        for cpu in range(nr_cpus):
            mine = np.arange(cpu, n_threads, nr_cpus)
            # never the same thread twice in a row: step by 1..k-1 through this cpu's threads
            steps = rng.integers(1, len(mine), per_cpu)
            idx = mine[np.cumsum(steps) % len(mine)]
            dur = np.maximum(rng.exponential(means[idx]), 1_000).astype(np.int64)
            starts = builder.start_ts + np.concatenate(([0], np.cumsum(dur)[:-1]))
            state = np.where(rng.random(per_cpu) < sleeps[idx], SLEEPING, PREEMPTED).astype(np.int64)
            all_starts.append(starts)
            all_ends.append(starts + dur)
            all_idx.append(idx)
            all_state.append(state)
            end_ts = max(end_ts, int(starts[-1] + dur[-1]))
            prev_idx = np.concatenate(([-1], idx[:-1]))
            prev_state = np.concatenate(([0], state[:-1]))
            prev_tid = np.where(prev_idx >= 0, tids[np.maximum(prev_idx, 0)], 0)
            prio = np.full(per_cpu, NORMAL_PRIO)
            for lo in range(0, per_cpu, batch):
                hi = min(lo + batch, per_cpu)
                writer.append("raw_sched_switch", pa.table({
                    "ts": starts[lo:hi], "cpu": np.full(hi - lo, cpu), "prev_tid": prev_tid[lo:hi],
                    "prev_state": prev_state[lo:hi], "prev_prio": prio[lo:hi],
                    "next_tid": tids[idx[lo:hi]], "next_prio": prio[lo:hi]}))
                writer.checkpoint()
        slices = (np.concatenate(all_starts), np.concatenate(all_ends), np.concatenate(all_idx),
                  np.concatenate(all_state))
        writer.append("raw_sched_waking", _bulk_wakings(rng, slices, tids=tids, wakers=wakers,
                                                        nr_cpus=nr_cpus))
        writer.checkpoint()
        builder.duration_ns = end_ts - builder.start_ts
        del all_starts, all_ends, all_idx, all_state, slices
        finalizing = time.monotonic()
    if timings is not None:
        timings.update(ingest_s=finalizing - began, finalize_s=time.monotonic() - finalizing)
    return Path(path)


def generate_and_report(path: Path, switches: int) -> None:
    """A benchmark's generating child: write the capture, print its phase timings as JSON."""
    timings: dict[str, float] = {}
    bulk_capture(path, switches=switches, timings=timings)
    print(json.dumps(timings))


def _bulk_wakings(rng: np.random.Generator, slices: tuple[np.ndarray, ...], *, tids: np.ndarray,
                  wakers: np.ndarray, nr_cpus: int) -> pa.Table:
    """A waking inside every sleep gap: between a slice ending asleep and the thread's next slice."""
    starts, ends, idx, state = slices
    order = np.lexsort((starts, idx))
    s_idx, s_start, s_end, s_state = idx[order], starts[order], ends[order], state[order]
    same_next = np.concatenate((s_idx[1:] == s_idx[:-1], [False]))
    sel = same_next & (s_state == SLEEPING)
    gap_start = s_end[sel]
    next_start = np.concatenate((s_start[1:], [0]))[sel]
    ts = gap_start + ((next_start - gap_start) * rng.uniform(0.5, 1.0, sel.sum())).astype(np.int64)
    who = s_idx[sel]
    keep = np.argsort(ts, kind="stable")
    cpu = who % nr_cpus
    waker = wakers[who][keep]
    # a waker 0 is a hard interrupt on an idle CPU (context 2, the task on the CPU 0), else a task
    return pa.table({"ts": ts[keep], "cpu": cpu[keep], "waker_tid": waker,
                     "wakee_tid": tids[who][keep], "target_cpu": cpu[keep],
                     "is_new": np.zeros(len(keep), bool),
                     "context": np.where(waker == 0, 2, 0).astype(np.int16), "current_tid": waker})
