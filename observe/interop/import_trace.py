"""Import a Perfetto trace or a `perf sched record` recording as a capture (`threadwise import`).

Problem: `perf sched record` is on every Linux box and Perfetto traces are
what scheduler people already keep; a user should be able to record where
threadwise is not installed and train here. The result must be a capture like
any other (the same raw tables, finalize.sql, analyze and synthesize accept
it), say that it was imported and from what, and carry the trace's loss
forward. Traces can hold tens of millions of events.

Approach: the file's first bytes say what it is (perf.data starts with
`PERFILE2`; a Perfetto trace with a `Trace.packet` field), anything else is
refused. A decoder per format (import_perfetto.py, import_perf.py) feeds
the import sink (sink.py) with numpy columns of the kernel's events, which
appends them to the capture in bounded batches. What the kernel stream does
not say directly is rebuilt the way a live capture records it: a thread's
tgid and name (`raw_task_seen`) at its first switch-out (else its first
switch-in, else when the trace listed it), births, exits and renames as the
trace gives them. The target process is
chosen after the whole trace is read (`--pid`, or `--comm`: processes whose
main thread is last named so), the topology comes from the trace where it
has one, else from `--shape`, else from the CPUs the events name (SMT
unknown, said in the capture's notes).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from threadwise.errors import InputError, TargetError, UsageError
from threadwise.observe.interop.import_perf import decode_perf
from threadwise.observe.interop.import_perfetto import decode_perfetto
from threadwise.observe.interop.sink import ImportSink, TraceSource
from threadwise.observe.schema import CLONE_THREAD, table_from_rows
from threadwise.observe.store import EVENT_TABLES, SCHEMA_VERSION, CaptureMeta, CaptureWriter
from threadwise.paths import file_sha256
from threadwise.shape import Shape, parse_shape
from threadwise.topology import CpuInfo, synthetic_topology

PERF_MAGIC = b"PERFILE2"


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


def import_trace(trace: Path, output: Path, *, pid: int | None = None, comm: str | None = None,
                 shape: str | None = None, force: bool = False,
                 progress: Callable[[str], None] | None = None) -> ImportResult:
    """Build a capture at `output` from a Perfetto trace or a perf.data recording."""
    if (pid is None) == (comm is None):
        raise UsageError("choose the target process with exactly one of --pid or --comm",
                         hint="threadwise import TRACE --comm NAME -o CAPTURE.duckdb")
    kind = detect_format(trace)
    chosen_shape = parse_shape(shape) if shape is not None else None
    writer = CaptureWriter(output, force=force)
    try:
        sink = ImportSink(writer)
        if kind == "perf":
            source = decode_perf(trace, sink, progress=progress)
        else:
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


def _topology(sink: ImportSink, source: TraceSource, shape: Shape | None) -> tuple[list[CpuInfo], str]:
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
                shape: Shape | None) -> ImportResult:
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
    digest = file_sha256(trace)[:16]
    notes = [f"imported from {origin} {trace.resolve()} ({size:,} bytes, sha256 {digest}...)",
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
