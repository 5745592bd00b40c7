"""The import sink: decoded kernel events in, a capture's raw tables and thread book out.

Problem: a trace can hold tens of millions of events, and what the kernel
stream does not say directly (a thread's tgid and name at its first sighting)
must be rebuilt the way a live capture records it.
Approach: each format's decoder (import_perfetto.py, import_perf.py) feeds
`ImportSink` with numpy columns; the sink appends them to the capture as Arrow
batches of the raw tables' schemas (schema.SCHEMAS) whenever a million rows
are pending, so memory stays bounded, and keeps the book of names, tgids,
births, exits and renames that import_trace.py writes once the trace is read.
`TraceSource` is what a decoder learnt besides the events.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from threadwise.observe.schema import CLONE_THREAD, SCHEMAS
from threadwise.observe.store import EVENT_TABLES, CaptureWriter, LossReport
from threadwise.topology import CpuInfo

FLUSH_ROWS = 1_000_000


@dataclass
class TraceSource:
    """What a decoder learnt about the trace besides its events."""

    kind: str                          # perfetto | perf
    tracer_version: str
    host: str = "unknown"
    kernel_release: str = "unknown"
    start_wall: dt.datetime | None = None
    topology: list[CpuInfo] | None = None
    topology_note: str = ""
    window: tuple[int | None, int | None] = (None, None)   # the trace's own start/end, when it says
    loss_detail: str = ""
    notes: list[str] = field(default_factory=list)


def _first_by_tid(tids: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row of each tid's earliest event: (tids, row indexes)."""
    order = np.lexsort((ts, tids))
    unique, first = np.unique(tids[order], return_index=True)
    return unique, order[first]


class ImportSink:
    """Receives decoded events, writes them to the capture in bounded batches, keeps the thread book."""

    def __init__(self, writer: CaptureWriter, *, flush_rows: int = FLUSH_ROWS) -> None:
        self.writer = writer
        self.flush_rows = flush_rows
        self._pending: dict[str, list[list[np.ndarray]]] = {name: [] for name in
                                                            ("raw_sched_switch", "raw_sched_waking",
                                                             "raw_sched_migrate")}
        self._pending_rows = 0
        self.counts: dict[str, int] = dict.fromkeys(EVENT_TABLES, 0)
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.cpus: set[int] = set()
        self.tgid: dict[int, int] = {}
        self.latest_name: dict[int, tuple[int, str]] = {}
        self.first_out: dict[int, tuple[int, str]] = {}
        self.first_in: dict[int, tuple[int, str]] = {}
        self.listed: dict[int, tuple[int | None, str]] = {}
        self.births: list[tuple[int, int, int, int, int, str]] = []     # ts, cpu, parent, child, flags, comm
        self.exits: list[tuple[int, int, int, int | None, str]] = []    # ts, cpu, tid, tgid, comm
        self.renames: list[tuple[int, int, int, str, str]] = []
        self.losses: list[LossReport] = []

    # --- events -------------------------------------------------------------------------------
    def _span(self, ts: np.ndarray) -> None:
        if len(ts):
            low, high = int(ts.min()), int(ts.max())
            self.first_ts = low if self.first_ts is None else min(self.first_ts, low)
            self.last_ts = high if self.last_ts is None else max(self.last_ts, high)

    def _queue(self, table: str, columns: list[np.ndarray]) -> None:
        self._pending[table].append(columns)
        self._pending_rows += len(columns[0])
        self.counts[table] += len(columns[0])
        if self._pending_rows >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        for table, parts in self._pending.items():
            if not parts:
                continue
            schema = SCHEMAS[table]
            arrays = [pa.array(np.concatenate([part[i] for part in parts]), type=column.type)
                      for i, column in enumerate(schema)]
            self.writer.append(table, pa.Table.from_arrays(arrays, schema=schema))
            parts.clear()
        self._pending_rows = 0

    def switches(  # noqa: PLR0917 - a raw row's columns, in order
            self, ts: np.ndarray, cpu: np.ndarray, prev: np.ndarray, prev_state: np.ndarray,
                 prev_prio: np.ndarray, nxt: np.ndarray, next_prio: np.ndarray,
                 prev_comm: np.ndarray, next_comm: np.ndarray) -> None:
        """sched_switch rows (comms as object arrays, for the names threads had then)."""
        if not len(ts):
            return
        self._span(ts)
        self.cpus.update(np.unique(cpu).tolist())
        self._queue("raw_sched_switch", [ts, cpu, prev, prev_state, prev_prio, nxt, next_prio])
        for book, tids, comms in ((self.first_out, prev, prev_comm), (self.first_in, nxt, next_comm)):
            unique, rows = _first_by_tid(tids, ts)
            for tid, row in zip(unique.tolist(), rows.tolist(), strict=True):
                if tid and (tid not in book or ts[row] < book[tid][0]):
                    book[tid] = (int(ts[row]), str(comms[row]))

    def wakings(  # noqa: PLR0917 - a raw row's columns, in order
            self, ts: np.ndarray, cpu: np.ndarray, waker: np.ndarray, wakee: np.ndarray,
                target_cpu: np.ndarray, is_new: np.ndarray, context: np.ndarray | None = None,
                current: np.ndarray | None = None) -> None:
        """sched_waking rows; `context` and `current` (object arrays, None where unknown) are
        what the trace says of the waker's context and the task on the CPU (migration 7), NULL
        when it says nothing (perf's text; a Perfetto waking without common_flags)."""
        if len(ts):
            self._span(ts)
            unknown = np.full(len(ts), None, dtype=object)
            self._queue("raw_sched_waking", [ts, cpu, waker, wakee, target_cpu, is_new,
                                             unknown if context is None else context,
                                             unknown if current is None else current])

    def migrations(
            self, ts: np.ndarray, cpu: np.ndarray, tid: np.ndarray, orig: np.ndarray,
                   dest: np.ndarray) -> None:
        if len(ts):
            self._span(ts)
            self._queue("raw_sched_migrate", [ts, cpu, tid, orig, dest])

    def birth(  # noqa: PLR0917 - a raw row's columns, in order
            self, ts: int, cpu: int, parent: int, child: int, clone_flags: int, comm: str) -> None:
        self.births.append((ts, cpu, parent, child, clone_flags, comm))
        if clone_flags & CLONE_THREAD and parent in self.tgid:
            self.tgid.setdefault(child, self.tgid[parent])
        elif not clone_flags & CLONE_THREAD:
            self.tgid.setdefault(child, child)
        self.named(child, comm, ts)

    def exit(self, ts: int, cpu: int, tid: int, tgid: int | None, comm: str) -> None:
        self.exits.append((ts, cpu, tid, tgid, comm))
        if tgid:
            self.tgid.setdefault(tid, tgid)
        self.named(tid, comm, ts)

    def rename(self, ts: int, cpu: int, tid: int, old: str, new: str) -> None:
        self.renames.append((ts, cpu, tid, old, new))
        self.named(tid, new, ts)

    def thread(self, tid: int, tgid: int | None, name: str | None, ts: int | None = None) -> None:
        """A thread the trace lists (a process tree, perf's task records): its tgid and name."""
        if tid == 0:
            return
        if tgid:
            self.tgid[tid] = tgid
        if name is not None:
            self.listed[tid] = (ts, name)
            if ts is not None:
                self.named(tid, name, ts)

    def named(self, tid: int, name: str, ts: int) -> None:
        if tid not in self.latest_name or ts >= self.latest_name[tid][0]:
            self.latest_name[tid] = (ts, name)

    def lost(self, ts: int, source: str, events: int) -> None:
        if events:
            self.losses.append(LossReport(ts, source, events))

    # --- the end ------------------------------------------------------------------------------
    def name_of(self, tid: int) -> str | None:
        candidates = [entry for entry in (self.latest_name.get(tid), self.first_out.get(tid),
                                          self.first_in.get(tid)) if entry is not None]
        if candidates:
            return max(candidates, key=lambda entry: entry[0])[1]
        listed = self.listed.get(tid)
        return listed[1] if listed else None

    def processes(self) -> dict[int, str]:
        """Every process the trace knows: tgid -> its main thread's last name."""
        tgids = set(self.tgid.values()) - {0}
        return {tgid: self.name_of(tgid) or "" for tgid in sorted(tgids)}

    def thread_counts(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for tid, tgid in self.tgid.items():
            if tid in self.first_in or tid in self.first_out:
                counts[tgid] = counts.get(tgid, 0) + 1
        return counts

    def seen_rows(self, window_start: int) -> list[tuple[int, int, int, str]]:
        rows = []
        for tid in sorted(set(self.first_out) | set(self.first_in) | set(self.listed)):
            entry = self.first_out.get(tid) or self.first_in.get(tid)
            if entry is None:
                ts, name = self.listed[tid]
                entry = (window_start if ts is None else max(ts, window_start), name)
            listed = self.listed.get(tid)
            name = entry[1] or (listed[1] if listed else "")
            rows.append((entry[0], tid, self.tgid.get(tid, tid), name))
        return rows
