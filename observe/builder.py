"""Build a capture from events you already have, through the real writer and finalize.sql.

Problem: tests, notebooks and the benchmark need captures with known content
(an empty capture, tid reuse, 15-character names, lost events, SMT siblings,
10 million switches) without tracing anything, and each such capture must be
exactly what a live one is: the same raw tables, filled with the tracer
raw tables' Arrow schemas (schema.SCHEMAS), the same typed metadata rows
(store.CaptureMeta, topology.CpuInfo, procfs.ThreadSnapshot), the same
finalize.sql.

Approach: one builder, `CaptureBuilder`, with two ways of giving events that
can be mixed:
- raw rows per raw table (`events`), in the table's column order, or Arrow
  batches streamed while the file is open (`open` yields the CaptureWriter,
  for bulk data that should not sit in memory twice);
- the libbpf tracer's record files from a run elsewhere (`tracer_records`: a
  lab guest that has the tracer but no Python, refine/measure/blockers.py), read by
  the same reader and ingest as a live capture's (records.py, ingest.py);
- a description the kernel's view is derived from: threads (`thread`: born
  inside the capture, exited, or just seen), on-CPU *slices* (`slice`,
  `periodic`) and wakings. Each CPU's slices become the sched_switch stream the
  kernel would have emitted, idle (tid 0) in the gaps; alive target threads
  get an end-of-capture /proc snapshot.
The machine is `nr_cpus` CPUs in cores of `threads_per_core` SMT siblings
(topology.synthetic_topology), so SMT is a constructor option.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.observe.ingest import ingest_records
from threadwise.observe.procfs import CpuSteal, ThreadSnapshot
from threadwise.observe.records import RecordReader
from threadwise.observe.schema import CLONE_THREAD, SCHEMAS, table_from_rows
from threadwise.observe.store import (
    EVENT_TABLES,
    SCHEMA_VERSION,
    CaptureMeta,
    CaptureWriter,
    LossReport,
)
from threadwise.observe.titles import ProcessTitle
from threadwise.observe.tracer_build import source_hash
from threadwise.topology import synthetic_topology

# Kernel prev_state values (sched_switch): running/preempted, sleeping, disk sleep.
PREEMPTED = 0x100
SLEEPING = 1
UNINTERRUPTIBLE = 2
STATES = {"R+": PREEMPTED, "R": 0, "S": SLEEPING, "D": UNINTERRUPTIBLE}
NORMAL_PRIO = 120           # kernel prio of a nice-0 CFS task


@dataclass(frozen=True)
class _Thread:
    tid: int
    tgid: int
    comm: str
    born_ts: int | None
    exit_ts: int | None


@dataclass
class CaptureBuilder:
    """A capture described by raw rows and/or threads, slices and wakings; `write` makes the file."""

    start_ts: int = 1_000_000_000
    duration_ns: int = 1_000_000_000
    nr_cpus: int = 2
    threads_per_core: int = 1
    target_tgids: list[int] = field(default_factory=list)
    events_lost: int = 0
    host: str = "synthetic"
    kernel_release: str = "synthetic"
    _records: list[Path] = field(default_factory=list)
    _rows: dict[str, list[tuple]] = field(default_factory=dict)
    _threads: list[_Thread] = field(default_factory=list)
    _slices: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    _snapshots: list[ThreadSnapshot] = field(default_factory=list)
    _steal: list[CpuSteal] = field(default_factory=list)
    _titles: list[ProcessTitle] = field(default_factory=list)
    _identity: dict[int, tuple[str, int | None, int | None]] = field(default_factory=dict)

    @property
    def end_ts(self) -> int:
        return self.start_ts + self.duration_ns

    # --- raw events -----------------------------------------------------------------
    def events(self, table: str, rows: Iterable[tuple]) -> CaptureBuilder:
        """Raw rows of `table` (columns as schema.SCHEMAS[table], in order)."""
        if table not in SCHEMAS:
            raise ValueError(f"not a raw table: {table} (one of {sorted(SCHEMAS)})")
        self._rows.setdefault(table, []).extend(rows)
        return self

    def tracer_records(self, directory: Path) -> CaptureBuilder:
        """The events of a libbpf tracer's record files (`threadwise-sched --out DIRECTORY`), up
        to the last complete record; the capture then says it was traced by libbpf."""
        self._records.append(Path(directory))
        return self

    def snapshot(self, ts: int, phase: str, tid: int, tgid: int, comm: str, *, runtime_ns: int = 0,
                 process_comm: str = "proc", cmdline: str = "proc --x") -> CaptureBuilder:
        """A /proc snapshot of one thread (schedstat runtime `runtime_ns`, one timeslice)."""
        self._snapshots.append(ThreadSnapshot(
            ts=ts, tid=tid, tgid=tgid, comm=comm, process_comm=process_comm, cmdline=cmdline,
            cgroup="/test", nice=0, policy="SCHED_OTHER", rt_priority=0, sum_exec_runtime=runtime_ns,
            run_delay=0, timeslices=1, phase=phase))
        return self

    def process_identity(self, tgid: int, *, cmdline: str, euid: int | None = None,
                         egid: int | None = None) -> CaptureBuilder:
        """What the end snapshots of process `tgid`'s threads say of it: its command line (a
        process title, `nginx: worker process`) and effective ids (None: not read, as an
        older capture). Without it a process's cmdline is its leader's comm, with no ids."""
        self._identity[tgid] = (cmdline, euid, egid)
        return self

    def title(self, ts: int, pid: int, title: str) -> CaptureBuilder:
        """A `process_title` row: process `pid` read with `title` at `ts` (migration 8)."""
        self._titles.append(ProcessTitle(ts, pid, title))
        return self

    def steal(self, ts: int, phase: str, cpu: int, steal_ns: int) -> CaptureBuilder:
        """One read of a CPU's steal counter (a `cpu_steal` row)."""
        self._steal.append(CpuSteal(ts=ts, phase=phase, cpu=cpu, steal_ns=steal_ns))
        return self

    # --- described events -----------------------------------------------------------
    def thread(self, tid: int, tgid: int, comm: str, *, born_ts: int | None = None,
               exit_ts: int | None = None) -> int:
        """Declare a thread instance (born inside the capture when born_ts is given)."""
        self._threads.append(_Thread(tid, tgid, comm, born_ts, exit_ts))
        return tid

    def slice(self, tid: int, cpu: int, ts: int, dur: int, end: str = "S") -> None:
        """`tid` ran on `cpu` from ts for dur ns, then left in state `end` (S, D, R, R+)."""
        self._slices.append((cpu, ts, dur, tid, STATES[end]))

    def waking(self, ts: int, waker: int, wakee: int, *, cpu: int = 0, target_cpu: int = 0,
               is_new: bool = False, context: int | None = None, current: int | None = None) -> None:
        """A wakeup of `wakee` by `waker` (0: an interrupt or the idle task). `context` (0 task,
        1 softirq, 2 hardirq, 3 NMI: tracers/sched.h) and `current` (the task on the CPU; by
        default the waker) are what a tracer of migration 7 records; None: not recorded."""
        if context is not None and current is None:
            current = waker
        self.events("raw_sched_waking", [(ts, cpu, waker, wakee, target_cpu, is_new, context, current)])

    def periodic(self, tid: int, cpu: int, *, first_ts: int, run_ns: int, period_ns: int,
                 count: int, waker: int | None = None, latency_ns: int = 0) -> None:
        """`count` runs of run_ns every period_ns; each woken by `waker` latency_ns before."""
        for i in range(count):
            ts = first_ts + i * period_ns
            if waker is not None and latency_ns >= 0:
                self.waking(ts - latency_ns, waker, tid, cpu=cpu, target_cpu=cpu)
            self.slice(tid, cpu, ts, run_ns, "S")

    # --- writing --------------------------------------------------------------------
    def write(self, path: Path, *, force: bool = True) -> Path:
        """Write the capture (raw batches, metadata, finalize, rename into place)."""
        with self.open(path, force=force) as writer:
            pass
        return writer.final_path

    @contextlib.contextmanager
    def open(self, path: Path, *, force: bool = True) -> Iterator[CaptureWriter]:
        """The capture's writer, open for raw Arrow batches (`writer.append`); on leaving,
        the described events and the metadata are written and the file finalized.
        Fields such as `duration_ns` may still change inside the block."""
        writer = CaptureWriter(Path(path), force=force)
        try:
            yield writer
            for directory in self._records:
                ingest_records(RecordReader(directory), writer)
            self._write_events(writer)
            self._write_metadata(writer)
            writer.finalize()
        except BaseException:
            writer.abandon()
            raise

    def _write_events(self, writer: CaptureWriter) -> None:
        rows = {table: list(found) for table, found in self._rows.items()}
        rows.setdefault("raw_sched_switch", []).extend(self._switches())
        births = [t for t in self._threads if t.born_ts is not None]
        rows.setdefault("raw_task_new", []).extend(
            (t.born_ts, 0, t.tgid, t.tgid, t.tid, t.tgid, CLONE_THREAD if t.tid != t.tgid else 0, t.comm)
            for t in births)
        rows.setdefault("raw_task_exit", []).extend(
            (t.exit_ts, 0, t.tid, t.tgid, t.comm) for t in self._threads if t.exit_ts is not None)
        rows.setdefault("raw_task_seen", []).extend(
            (self.start_ts, t.tid, t.tgid, t.comm) for t in self._threads if t.born_ts is None)
        for table, found in rows.items():
            writer.append(table, table_from_rows(table, sorted(found) if table in EVENT_TABLES
                                                 else found))

    def _switches(self) -> list[tuple[int, int, int, int, int, int, int]]:
        """Each CPU's slices as the sched_switch stream the kernel would emit (idle between)."""
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
                    rows.append((free_at, cpu, current, current_state, NORMAL_PRIO, 0, NORMAL_PRIO))
                    current, current_state = 0, 0
                rows.append((ts, cpu, current, current_state if current else 0, NORMAL_PRIO, tid,
                             NORMAL_PRIO))
                current, current_state, free_at = tid, end_state, ts + dur
            if current != 0 and free_at < self.end_ts:
                rows.append((free_at, cpu, current, current_state, NORMAL_PRIO, 0, NORMAL_PRIO))
        return rows

    def _write_metadata(self, writer: CaptureWriter) -> None:
        leaders = {t.tid: t.comm for t in self._threads if t.tid == t.tgid}
        alive = [t for t in self._threads if t.exit_ts is None and t.tgid in self.target_tgids]
        identity = {t.tgid: self._identity.get(t.tgid, (leaders.get(t.tgid, t.comm), None, None))
                    for t in alive}
        end = [ThreadSnapshot(
            ts=self.end_ts, tid=t.tid, tgid=t.tgid, comm=t.comm, process_comm=leaders.get(t.tgid, t.comm),
            cmdline=identity[t.tgid][0], cgroup="/synthetic", nice=0, policy="SCHED_OTHER",
            rt_priority=0, sum_exec_runtime=0, run_delay=0, timeslices=0, phase="end",
            euid=identity[t.tgid][1], egid=identity[t.tgid][2]) for t in alive]
        writer.insert("proc_snapshot", [*self._snapshots, *end])
        writer.insert("cpu_steal", self._steal)
        writer.insert("process_title", self._titles)
        if self.events_lost:
            writer.insert("raw_lost", [LossReport(self.end_ts, "synthetic", self.events_lost)])
        writer.insert("cpu_topology", synthetic_topology(self.nr_cpus, self.threads_per_core))
        tgids = sorted(self.target_tgids)
        backend, version = (("libbpf", f"threadwise-sched {source_hash()}") if self._records
                            else ("synthetic", "0"))
        writer.insert("capture", [CaptureMeta(
            capture_id=str(uuid.uuid4()), schema_version=SCHEMA_VERSION, host=self.host,
            kernel_release=self.kernel_release, start_wall=dt.datetime.now(dt.UTC).replace(tzinfo=None),
            start_ts=self.start_ts, end_ts=self.end_ts, duration_ns=self.duration_ns, target_kind="pid",
            target_spec=",".join(map(str, tgids)) or "synthetic", target_tgids=tgids,
            tracer_backend=backend, tracer_version=version,
            events_recorded=sum(writer.rows[table] for table in EVENT_TABLES),
            events_lost=self.events_lost, loss_detail=f"{backend}: {self.events_lost} lost",
            end_reason="duration")])
