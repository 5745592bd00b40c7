"""Import a Perfetto trace or a `perf sched record` recording as a capture (`threadwise import`).

Problem: `perf sched record` is on every Linux box and Perfetto traces are
what scheduler people already keep; a user should be able to record where
threadwise is not installed and train here. The result must be a capture like
any other (the same raw tables, finalize.sql, analyze and synthesize accept
it), say that it was imported and from what, and carry the trace's loss
forward. Traces can hold tens of millions of events.

Approach: the file's first bytes say what it is (perf.data starts with
`PERFILE2`; a Perfetto trace with a `Trace.packet` field), anything else is
refused. A decoder per format (import_perfetto.py, perf_import.py) feeds
`ImportSink` with numpy columns of the kernel's events; the sink appends
them to the capture as Arrow batches of the raw tables' schemas
(stream.SCHEMAS) whenever a million rows are pending, so memory stays
bounded. What the kernel stream does not say directly is rebuilt the way a
live capture records it: a thread's tgid and name (`raw_task_seen`) at its
first switch-out (else its first switch-in, else when the trace listed it),
births, exits and renames as the trace gives them. The target process is
chosen after the whole trace is read (`--pid`, or `--comm`: processes whose
main thread is last named so), the topology comes from the trace where it
has one, else from `--shape`, else from the CPUs the events name (SMT
unknown, said in the capture's notes).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from threadwise.errors import InputError, TargetError, UsageError
from threadwise.observe.store import EVENT_TABLES, SCHEMA_VERSION, CaptureMeta, CaptureWriter, LossReport
from threadwise.observe.stream import CLONE_THREAD, SCHEMAS, table_from_rows
from threadwise.observe.topology import CpuInfo, synthetic_topology

PERF_MAGIC = b"PERFILE2"
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


@dataclass
class ImportResult:
    """What `import_trace` wrote."""

    path: Path
    source: str
    events: int
    events_lost: int
    duration_s: float
    target_tgids: list[int]
    target_threads: int
    topology: str


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
                target_cpu: np.ndarray, is_new: np.ndarray) -> None:
        if len(ts):
            self._span(ts)
            self._queue("raw_sched_waking", [ts, cpu, waker, wakee, target_cpu, is_new])

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


def select_targets(sink: ImportSink, *, pid: int | None, comm: str | None) -> tuple[str, str, list[int]]:
    """(target_kind, target_spec, tgids) from --pid / --comm, checked against the trace."""
    processes = sink.processes()
    counts = sink.thread_counts()
    busiest = sorted(processes, key=lambda tgid: (-counts.get(tgid, 0), tgid))[:8]
    listing = ", ".join(f"{processes[tgid] or '?'} (pid {tgid}, {counts.get(tgid, 0)} threads)"
                        for tgid in busiest)
    if pid is not None:
        if pid not in processes:
            raise TargetError(f"process {pid} is not in the trace",
                              hint=f"processes with the most threads in it: {listing}" if listing else None)
        return "pid", str(pid), [pid]
    assert comm is not None
    wanted = comm[:15]
    tgids = [tgid for tgid, name in processes.items() if name == wanted]
    if not tgids:
        raise TargetError(f"no process named {wanted!r} in the trace",
                          hint=f"processes with the most threads in it: {listing}" if listing else None)
    return "comm", comm, tgids


def detect_format(path: Path) -> str:
    """'perf' or 'perfetto'; InputError for anything else."""
    if not path.exists():
        raise UsageError(f"trace {path} not found", hint="give the path of a perf.data or a Perfetto trace")
    if path.is_dir():
        raise UsageError(f"{path} is a directory", hint="give the path of a perf.data or a Perfetto trace")
    with path.open("rb") as handle:
        head = handle.read(8)
    if head == PERF_MAGIC:
        return "perf"
    if head[:1] == b"\x0a":
        return "perfetto"
    what = "an empty file" if not head else f"a file starting with {head!r}"
    raise InputError(f"{path} is neither a Perfetto trace nor a perf.data recording ({what})",
                     hint="record with `perf sched record -o perf.data -- CMD` (or -a/-p PID), or give a "
                          "Perfetto protobuf trace with ftrace sched events")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def import_trace(trace: Path, output: Path, *, pid: int | None = None, comm: str | None = None,
                 shape: str | None = None, force: bool = False,
                 progress: Callable[[str], None] | None = None) -> ImportResult:
    """Build a capture at `output` from a Perfetto trace or a perf.data recording."""
    if (pid is None) == (comm is None):
        raise UsageError("choose the target process with exactly one of --pid or --comm",
                         hint="threadwise import TRACE --comm NAME -o CAPTURE.duckdb")
    kind = detect_format(trace)
    chosen_shape = None
    if shape is not None:
        from threadwise.synthesize.shape import parse_shape

        chosen_shape = parse_shape(shape)
    writer = CaptureWriter(output, force=force)
    try:
        sink = ImportSink(writer)
        if kind == "perf":
            from threadwise.observe.perf_import import decode_perf

            source = decode_perf(trace, sink, progress=progress)
        else:
            from threadwise.observe.import_perfetto import decode_perfetto

            source = decode_perfetto(trace, sink, progress=progress)
        sink.flush()
        if not sink.counts["raw_sched_switch"]:
            what = "Perfetto trace" if kind == "perfetto" else "perf.data"
            raise InputError(f"{trace}: the {what} holds no sched_switch events",
                             hint="record the scheduler's tracepoints: `perf sched record` (perf), or a "
                                  "Perfetto config with ftrace events sched/sched_switch and "
                                  "sched/sched_waking")
        target_kind, target_spec, tgids = select_targets(sink, pid=pid, comm=comm)
        result = _write_rest(trace, writer, sink, source, kind, target_kind, target_spec, tgids,
                             chosen_shape)
        writer.finalize()
        return result
    except BaseException:
        writer.abandon()
        raise


def _topology(sink: ImportSink, source: TraceSource, shape) -> tuple[list[CpuInfo], str]:  # noqa: ANN001
    seen = max(sink.cpus, default=0) + 1
    if shape is not None:
        siblings = shape.siblings
        infos = []
        everyone = tuple(cpu for core in siblings for cpu in core)
        for key, core in enumerate(siblings):
            infos.extend(CpuInfo(cpu, key, 0, key, tuple(core), 0, everyone, True) for cpu in core)
        if max(everyone, default=-1) + 1 < seen:
            raise UsageError(f"--shape has {len(everyone)} CPUs but the trace has events on CPU {seen - 1}",
                             hint="give the shape of the machine the trace was recorded on")
        return sorted(infos, key=lambda info: info.cpu), f"from --shape ({shape.describe()})"
    if source.topology:
        return source.topology, source.topology_note or "from the trace"
    return synthetic_topology(seen), (f"{seen} CPUs seen in the trace's events, SMT siblings unknown "
                                      "(give --shape cores=N,threads-per-core=T)")


def _write_rest(  # noqa: PLR0917
        trace: Path, writer: CaptureWriter, sink: ImportSink, source: TraceSource, kind: str,
                target_kind: str, target_spec: str, tgids: list[int],
                shape) -> ImportResult:  # noqa: ANN001
    # The trace's own window where it states one (a threadwise export does), else its events' span.
    start = source.window[0] if source.window[0] is not None else sink.first_ts
    end = source.window[1] if source.window[1] is not None else sink.last_ts
    assert start is not None and end is not None
    tgid_of = sink.tgid
    births = []
    for ts, cpu, parent, child, flags, comm in sink.births:
        parent_tgid = tgid_of.get(parent, parent)
        births.append((ts, cpu, parent, parent_tgid, child, parent_tgid if flags & CLONE_THREAD else child,
                       flags, comm))
    writer.append("raw_task_new", table_from_rows("raw_task_new", sorted(births)))
    writer.append("raw_task_exit", table_from_rows("raw_task_exit", sorted(
        (ts, cpu, tid, tgid or tgid_of.get(tid, tid), comm) for ts, cpu, tid, tgid, comm in sink.exits)))
    writer.append("raw_task_rename", table_from_rows("raw_task_rename", sorted(sink.renames)))
    writer.append("raw_task_seen", table_from_rows("raw_task_seen", sink.seen_rows(start)))
    for table in ("raw_task_new", "raw_task_exit", "raw_task_rename"):
        sink.counts[table] = writer.rows[table]
    topology, topology_note = _topology(sink, source, shape)
    writer.insert("cpu_topology", topology)
    if sink.losses:
        writer.insert("raw_lost", sink.losses)
    lost = sum(report.events for report in sink.losses)
    size = trace.stat().st_size
    origin = "Perfetto trace" if kind == "perfetto" else "perf.data recording"
    notes = [f"imported from {origin} {trace.resolve()} ({size:,} bytes, sha256 {_sha256(trace)[:16]}...)",
             f"topology: {topology_note}", *source.notes]
    events = sum(writer.rows[table] for table in EVENT_TABLES)
    writer.insert("capture", [CaptureMeta(
        capture_id=str(uuid.uuid4()), schema_version=SCHEMA_VERSION, host=source.host,
        kernel_release=source.kernel_release,
        start_wall=source.start_wall or dt.datetime.fromtimestamp(trace.stat().st_mtime, dt.UTC).replace(
            tzinfo=None),
        start_ts=start, end_ts=end, duration_ns=end - start, target_kind=target_kind,
        target_spec=target_spec, target_tgids=tgids, tracer_backend=f"import:{kind}",
        tracer_version=source.tracer_version, events_recorded=events, events_lost=lost,
        loss_detail=source.loss_detail or f"{lost} events lost as the trace reports",
        end_reason="imported", notes="; ".join(notes))])
    threads = sum(1 for tid, tgid in sink.tgid.items() if tgid in tgids
                  and (tid in sink.first_in or tid in sink.first_out or tid in sink.listed))
    return ImportResult(path=writer.final_path, source=f"{origin} {trace}", events=events, events_lost=lost,
                        duration_s=(end - start) / 1e9, target_tgids=tgids, target_threads=threads,
                        topology=topology_note)
