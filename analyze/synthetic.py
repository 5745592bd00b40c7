"""Synthetic captures: hand-built edge cases and large generated ones.

Problem: tests and the benchmark need captures with known content (an empty
capture, tid reuse, 15-character names, lost events, 10 million switches)
without tracing anything. They must go through the real writer
(`CaptureWriter`: raw Arrow batches, the capture row, finalize.sql) so they
exercise exactly what a live capture does.
Approach: `SyntheticCapture` collects *slices* (thread, cpu, start, duration,
end state) and turns each CPU's slices into the sched_switch stream the kernel
would have emitted (idle, tid 0, in the gaps). `bulk_capture` generates
millions of events with numpy in whole-array operations (threads pinned to
CPUs, back-to-back slices, a waking before every slice that follows a sleep).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from threadwise.observe.store import SCHEMA_VERSION, CaptureWriter

# Kernel prev_state values (sched_switch): running/preempted, sleeping, disk sleep.
PREEMPTED = 0x100
SLEEPING = 1
UNINTERRUPTIBLE = 2
_STATE = {"R+": PREEMPTED, "R": 0, "S": SLEEPING, "D": UNINTERRUPTIBLE}
_CAPTURE_COLUMNS = ["capture_id", "schema_version", "host", "kernel_release", "start_wall", "start_ts",
                    "end_ts", "duration_ns", "target_kind", "target_spec", "target_tgids",
                    "tracer_backend", "tracer_version", "events_recorded", "events_lost", "loss_detail",
                    "end_reason", "notes"]
_SNAPSHOT_COLUMNS = ["ts", "phase", "tid", "tgid", "comm", "process_comm", "cmdline", "cgroup", "nice",
                     "policy", "rt_priority", "sum_exec_runtime", "run_delay", "timeslices"]
_TOPOLOGY_COLUMNS = ["cpu", "core_id", "package_id", "core_key", "smt_siblings", "llc_id", "llc_cpus",
                     "online"]


@dataclass
class _Thread:
    tid: int
    tgid: int
    comm: str
    born_ts: int | None
    exit_ts: int | None


@dataclass
class SyntheticCapture:
    """A capture described by threads, slices and wakings; `write` makes the file."""

    start_ts: int = 1_000_000_000
    duration_ns: int = 1_000_000_000
    nr_cpus: int = 2
    target_tgids: list[int] = field(default_factory=list)
    events_lost: int = 0
    smt: bool = False
    _threads: list[_Thread] = field(default_factory=list)
    _slices: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    _wakings: list[tuple[int, int, int, int, int, bool]] = field(default_factory=list)

    @property
    def end_ts(self) -> int:
        return self.start_ts + self.duration_ns

    def thread(self, tid: int, tgid: int, comm: str, *, born_ts: int | None = None,
               exit_ts: int | None = None) -> int:
        """Declare a thread instance (born inside the capture when born_ts is given)."""
        self._threads.append(_Thread(tid, tgid, comm, born_ts, exit_ts))
        return tid

    def slice(self, tid: int, cpu: int, ts: int, dur: int, end: str = "S") -> None:
        """`tid` ran on `cpu` from ts for dur ns, then left in state `end` (S, D, R, R+)."""
        self._slices.append((cpu, ts, dur, tid, _STATE[end]))

    def waking(self, ts: int, waker: int, wakee: int, *, cpu: int = 0, target_cpu: int = 0,
               is_new: bool = False) -> None:
        self._wakings.append((ts, cpu, waker, wakee, target_cpu, is_new))

    def periodic(self, tid: int, cpu: int, *, first_ts: int, run_ns: int, period_ns: int,
                 count: int, waker: int | None = None, latency_ns: int = 0) -> None:
        """`count` runs of run_ns every period_ns; each woken by `waker` latency_ns before."""
        for i in range(count):
            ts = first_ts + i * period_ns
            if waker is not None and latency_ns >= 0:
                self.waking(ts - latency_ns, waker, tid, cpu=cpu, target_cpu=cpu)
            self.slice(tid, cpu, ts, run_ns, "S")

    def _switch_table(self) -> pa.Table:
        rows: list[tuple[int, int, int, int, int, int, int]] = []
        by_cpu: dict[int, list[tuple[int, int, int, int, int]]] = {}
        for entry in sorted(self._slices):
            by_cpu.setdefault(entry[0], []).append(entry)
        for cpu, entries in by_cpu.items():
            current, current_state, free_at = 0, 0, -1
            for _, ts, dur, tid, end_state in entries:
                if ts < free_at:
                    raise ValueError(f"overlapping slices on cpu {cpu} at {ts}")
                if current != 0 and ts > free_at:   # the previous thread left, idle until ts
                    rows.append((free_at, cpu, current, current_state, 120, 0, 120))
                    current, current_state = 0, 0
                rows.append((ts, cpu, current, current_state if current else 0, 120, tid, 120))
                current, current_state, free_at = tid, end_state, ts + dur
            if current != 0 and free_at < self.end_ts:
                rows.append((free_at, cpu, current, current_state, 120, 0, 120))
        rows.sort()
        names = ["ts", "cpu", "prev_tid", "prev_state", "prev_prio", "next_tid", "next_prio"]
        cols = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
        types = [pa.int64(), pa.int32(), pa.int32(), pa.int64(), pa.int32(), pa.int32(), pa.int32()]
        return pa.table([pa.array(c, t) for c, t in zip(cols, types, strict=True)], names=names)

    def write(self, path: Path, *, force: bool = True) -> Path:
        """Write the capture through CaptureWriter (raw batches, capture row, finalize)."""
        writer = CaptureWriter(Path(path), force=force)
        try:
            writer.append("raw_sched_switch", self._switch_table())
            wakings = sorted(self._wakings)
            writer.append("raw_sched_waking", pa.table({
                "ts": pa.array([w[0] for w in wakings], pa.int64()),
                "cpu": pa.array([w[1] for w in wakings], pa.int32()),
                "waker_tid": pa.array([w[2] for w in wakings], pa.int32()),
                "wakee_tid": pa.array([w[3] for w in wakings], pa.int32()),
                "target_cpu": pa.array([w[4] for w in wakings], pa.int32()),
                "is_new": pa.array([w[5] for w in wakings], pa.bool_()),
            }))
            births = [t for t in self._threads if t.born_ts is not None]
            writer.append("raw_task_new", pa.table({
                "ts": pa.array([t.born_ts for t in births], pa.int64()),
                "cpu": pa.array([0] * len(births), pa.int32()),
                "parent_tid": pa.array([t.tgid for t in births], pa.int32()),
                "parent_tgid": pa.array([t.tgid for t in births], pa.int32()),
                "tid": pa.array([t.tid for t in births], pa.int32()),
                "tgid": pa.array([t.tgid for t in births], pa.int32()),
                "clone_flags": pa.array([0x10000 if t.tid != t.tgid else 0 for t in births], pa.uint64()),
                "comm": pa.array([t.comm for t in births], pa.string()),
            }))
            exits = [t for t in self._threads if t.exit_ts is not None]
            writer.append("raw_task_exit", pa.table({
                "ts": pa.array([t.exit_ts for t in exits], pa.int64()),
                "cpu": pa.array([0] * len(exits), pa.int32()),
                "tid": pa.array([t.tid for t in exits], pa.int32()),
                "tgid": pa.array([t.tgid for t in exits], pa.int32()),
                "comm": pa.array([t.comm for t in exits], pa.string()),
            }))
            seen = [t for t in self._threads if t.born_ts is None]
            writer.append("raw_task_seen", pa.table({
                "ts": pa.array([self.start_ts] * len(seen), pa.int64()),
                "tid": pa.array([t.tid for t in seen], pa.int32()),
                "tgid": pa.array([t.tgid for t in seen], pa.int32()),
                "comm": pa.array([t.comm for t in seen], pa.string()),
            }))
            self._write_metadata(writer)
            return writer.finalize()
        except BaseException:
            writer.abandon()
            raise

    def _write_metadata(self, writer: CaptureWriter) -> None:
        leaders = {t.tid: t.comm for t in self._threads if t.tid == t.tgid}
        alive = [t for t in self._threads if t.exit_ts is None and t.tgid in self.target_tgids]
        if alive:
            writer.insert_rows("proc_snapshot", _SNAPSHOT_COLUMNS, [
                (self.end_ts, "end", t.tid, t.tgid, t.comm, leaders.get(t.tgid, t.comm),
                 leaders.get(t.tgid, t.comm), "/synthetic", 0, "SCHED_OTHER", 0, 0, 0, 0) for t in alive])
        if self.events_lost:
            writer.insert_rows("raw_lost", ["ts", "source", "events"],
                               [(self.end_ts, "synthetic", self.events_lost)])
        write_topology(writer, self.nr_cpus, smt=self.smt)
        events = len(self._slices) * 2 + len(self._wakings)
        write_capture_row(writer, start_ts=self.start_ts, end_ts=self.end_ts, tgids=self.target_tgids,
                          events=events, events_lost=self.events_lost)


def write_topology(writer: CaptureWriter, nr_cpus: int, *, smt: bool = False) -> None:
    """cpu_topology rows: one core per cpu, or SMT pairs (0,1), (2,3), ... when smt."""
    rows = []
    for cpu in range(nr_cpus):
        core = cpu // 2 if smt else cpu
        siblings = [core * 2, core * 2 + 1] if smt else [cpu]
        rows.append((cpu, core, 0, core, siblings, 0, list(range(nr_cpus)), True))
    writer.insert_rows("cpu_topology", _TOPOLOGY_COLUMNS, rows)


def write_capture_row(writer: CaptureWriter, *, start_ts: int, end_ts: int, tgids: list[int],
                      events: int, events_lost: int) -> None:
    writer.insert_rows("capture", _CAPTURE_COLUMNS, [(
        str(uuid.uuid4()), SCHEMA_VERSION, "synthetic", "synthetic",
        dt.datetime.now(dt.UTC).replace(tzinfo=None), start_ts, end_ts, end_ts - start_ts, "pid",
        ",".join(map(str, tgids)), sorted(tgids), "synthetic", "0", events, events_lost,
        f"synthetic: {events_lost} lost", "duration", None)])


# ---------------------------------------------------------------------------
# Bulk generation (benchmark): whole-array numpy, no per-event Python.
# ---------------------------------------------------------------------------
BULK_TGID = 5000
# (pattern, count, mean slice ns, probability a slice ends in sleep, waker index or -1)
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
            tgids.append(BULK_TGID if not pattern.startswith("other") else 9000)
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
    `finalize_s` (observe's finalize.sql + rename).
    """
    began = time.monotonic()
    rng = np.random.default_rng(seed)
    tids, comms, tgids, means, sleeps, wakers = bulk_threads()
    n_threads = len(tids)
    per_cpu = switches // nr_cpus
    start_ts = 1_000_000_000
    writer = CaptureWriter(Path(path), force=True)
    try:
        all_starts, all_ends, all_idx, all_state = [], [], [], []
        end_ts = start_ts
        for cpu in range(nr_cpus):
            mine = np.arange(cpu, n_threads, nr_cpus)
            # never the same thread twice in a row: step by 1..k-1 through this cpu's threads
            steps = rng.integers(1, len(mine), per_cpu)
            order = np.cumsum(steps) % len(mine)
            idx = mine[order]
            dur = np.maximum(rng.exponential(means[idx]), 1_000).astype(np.int64)
            starts = start_ts + np.concatenate(([0], np.cumsum(dur)[:-1]))
            state = np.where(rng.random(per_cpu) < sleeps[idx], SLEEPING, PREEMPTED).astype(np.int64)
            all_starts.append(starts)
            all_ends.append(starts + dur)
            all_idx.append(idx)
            all_state.append(state)
            end_ts = max(end_ts, int(starts[-1] + dur[-1]))
            prev_idx = np.concatenate(([-1], idx[:-1]))
            prev_state = np.concatenate(([0], state[:-1]))
            prev_tid = np.where(prev_idx >= 0, tids[np.maximum(prev_idx, 0)], 0).astype(np.int32)
            for lo in range(0, per_cpu, batch):
                hi = min(lo + batch, per_cpu)
                writer.append("raw_sched_switch", pa.table({
                    "ts": starts[lo:hi], "cpu": np.full(hi - lo, cpu, np.int32),
                    "prev_tid": prev_tid[lo:hi], "prev_state": prev_state[lo:hi],
                    "prev_prio": np.full(hi - lo, 120, np.int32), "next_tid": tids[idx[lo:hi]],
                    "next_prio": np.full(hi - lo, 120, np.int32)}))
                writer.checkpoint()
        slices = (np.concatenate(all_starts), np.concatenate(all_ends), np.concatenate(all_idx),
                  np.concatenate(all_state))
        wakings = _bulk_wakings(rng, slices, tids=tids, wakers=wakers, nr_cpus=nr_cpus)
        writer.append("raw_sched_waking", wakings)
        writer.append("raw_task_seen", pa.table({
            "ts": np.full(n_threads, start_ts, np.int64), "tid": tids, "tgid": tgids,
            "comm": pa.array(comms, pa.string())}))
        writer.insert_rows("proc_snapshot", _SNAPSHOT_COLUMNS, [
            (end_ts, "end", int(t), BULK_TGID, c, "bulkapp", "bulkapp", "/synthetic", 0, "SCHED_OTHER",
             0, 0, 0, 0) for t, c, g in zip(tids, comms, tgids, strict=True) if g == BULK_TGID])
        write_topology(writer, nr_cpus)
        write_capture_row(writer, start_ts=start_ts, end_ts=end_ts, tgids=[BULK_TGID],
                          events=switches + wakings.num_rows, events_lost=0)
        writer.checkpoint()
        del all_starts, all_ends, all_idx, all_state, slices, wakings
        finalizing = time.monotonic()
        final = writer.finalize()
        if timings is not None:
            timings.update(ingest_s=finalizing - began, finalize_s=time.monotonic() - finalizing)
        return final
    except BaseException:
        writer.abandon()
        raise


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
    waker = wakers[who]
    cpu = (who % nr_cpus).astype(np.int32)
    return pa.table({"ts": ts[keep], "cpu": cpu[keep], "waker_tid": waker[keep],
                     "wakee_tid": tids[who][keep], "target_cpu": cpu[keep],
                     "is_new": np.zeros(len(keep), bool)})
