"""Orchestrate one capture: tracer + target + /proc snapshots -> one DuckDB file.

Order matters for honesty:
1. tracing goes live first (the tracer's BEGIN), then a launched command
   starts, so thread births are seen;
2. the start snapshot of /proc (the kernel's runtime per thread) is read while
   tracing is live, and the end snapshot before tracing stops, so every
   thread's runtime in the capture can be checked against the kernel's;
3. the file is finalized and renamed into place last; Ctrl-C ends tracing
   early but still finalizes; any failure after data arrived still keeps it;
4. a duration is the traced window's length: it counts from the moment
   tracing went live, and the loop checks it before each round's work, so a
   busy host that slows the observer's own work (ingest, scans, a tracer's
   backlog) does not stretch the window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.errors import TargetError, TracerError
from threadwise.observe import leftovers, procfs
from threadwise.observe.backend import TracerBackend, TracerReport
from threadwise.observe.backends import choose_backend
from threadwise.observe.schema import table_from_rows
from threadwise.observe.store import (
    EVENT_TABLES,
    SCHEMA_VERSION,
    CaptureMeta,
    CaptureWriter,
    LossReport,
    TracerCount,
    open_capture,
)
from threadwise.observe.stream import ParsedChunk
from threadwise.observe.target import Target
from threadwise.observe.titles import TitleWatch
from threadwise.procs import me
from threadwise.sqlfiles import statement
from threadwise.topology import read_topology

POLL_INTERVAL_S = 0.25
# /proc scans for new target threads: at most every SCAN_INTERVAL_S, and only when the tracer saw
# a birth or rename that could have added one (Target.may_have_grown). A scan reads every target
# process; on hackbench's 160 processes a scan every 0.5 s took CPU the workload was waiting for
# (benchmarks/observer_cpu.py). SCAN_BACKSTOP_S bounds the wait if a birth record was dropped.
SCAN_INTERVAL_S = 0.5
SCAN_BACKSTOP_S = 5.0
# raw table <- kernel counter name in the tracer (one counter per event table)
COUNTED = {"switch": "raw_sched_switch", "waking": "raw_sched_waking",
           "migrate": "raw_sched_migrate", "new": "raw_task_new", "exit": "raw_task_exit",
           "rename": "raw_task_rename"}
assert sorted(COUNTED.values()) == sorted(EVENT_TABLES)


@dataclass
class CaptureResult:
    path: Path
    duration_s: float
    events: int
    events_lost: int
    end_reason: str
    target_threads: int
    warnings: list[str] = field(default_factory=list)
    switch_gaps: int = 0

    @property
    def events_per_s(self) -> float:
        return self.events / self.duration_s if self.duration_s > 0 else 0.0


Progress = Callable[[str], None]


def _stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _Snapshotter:
    """Reads /proc for target processes: at start, for new threads, and at end."""

    def __init__(self, writer: CaptureWriter) -> None:
        self.writer = writer
        self.seen_tids: set[int] = set()

    def take(self, tgids: set[int], phase: str, *, only_new: bool = False) -> int:
        # the CPUs' steal counters bracket every thread's window: read before a start or
        # scan snapshot and after the end one (runtime_check.sql)
        if phase != "end":
            self.writer.insert("cpu_steal", procfs.read_cpu_steal(phase))
        rows = []
        skip = self.seen_tids if only_new else frozenset()
        for tgid in sorted(tgids):
            for snap in procfs.snapshot_process(tgid, skip=skip):
                self.seen_tids.add(snap.tid)
                rows.append(dataclasses.replace(snap, phase=phase))
        self.writer.insert("proc_snapshot", rows)
        if phase == "end":
            self.writer.insert("cpu_steal", procfs.read_cpu_steal(phase))
        return len(rows)


def observe(target: Target, output: Path, *, duration_s: float | None, force: bool = False,
            backend_name: str | None = None, progress: Progress = _stderr_progress,
            backend: TracerBackend | None = None) -> CaptureResult:
    """Trace `target` into the capture `output` with `backend`, or the one named, or the default."""
    if backend is None:
        backend = choose_backend(backend_name, progress)
    else:
        backend.check()
    found = leftovers.find([output.resolve().parent])
    if found:
        progress(f"observe: note: {leftovers.hint(found)}")
    writer = CaptureWriter(output, force=force)
    workdir = Path(tempfile.mkdtemp(prefix=leftovers.WORKDIR_PREFIX))
    pid, start = me()
    # the owner record goes in first: a kill at any later moment leaves a directory `clean` can judge
    leftovers.write_owner(workdir, {"pid": pid, "start": start, "output": str(output.resolve()),
                                    "temp_capture": str(writer.temp_path.resolve()),
                                    "backend": backend.name, "target_kind": target.kind,
                                    "target_spec": target.spec})
    try:
        return _run(target, writer, backend, workdir, duration_s=duration_s, progress=progress)
    except BaseException:
        writer.abandon()
        target.stop_launched()
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass(frozen=True)
class _Live:
    """Tracing gone live: when (CLOCK_MONOTONIC ns, the capture's start_ts, and wall time), the
    /proc snapshotter that took the start snapshot, and the process titles' watch."""

    live_ts: int
    start_wall: dt.datetime
    snapper: _Snapshotter
    titles: TitleWatch   # process titles (observe/titles.py): read every round, kept when new or changed


@dataclass
class _Traced:
    """What the tracing loop counted, and why it ended."""

    events: int = 0
    lost_reported: int = 0
    end_reason: str = "duration"
    warnings: list[str] = field(default_factory=list)


def _run(target: Target, writer: CaptureWriter, backend: TracerBackend, workdir: Path, *,
         duration_s: float | None, progress: Progress) -> CaptureResult:
    live = _go_live(target, writer, backend, workdir, duration_s=duration_s, progress=progress)
    # Ctrl-C is a flag the loop reads between steps, not an exception: raised inside
    # a DuckDB append (a Python callback reading the Arrow batch) it came out as a
    # DuckDB error, the capture was lost and observe exited 1.
    interrupted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: interrupted.append(signum))
    try:
        traced = _trace(target, writer, backend, live, duration_s=duration_s, progress=progress,
                        interrupted=interrupted)
    finally:
        # From here on the capture must complete: a second Ctrl-C would lose it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if interrupted:
        traced.end_reason = "interrupted"
        progress("observe: interrupted; finishing the capture (keeps what was recorded) ...")
    try:
        return _stop(target, writer, backend, live, traced, progress=progress)
    finally:
        signal.signal(signal.SIGINT, previous)


def _go_live(target: Target, writer: CaptureWriter, backend: TracerBackend, workdir: Path, *,
             duration_s: float | None, progress: Progress) -> _Live:
    """Tracing live first, then the launched command, then the start snapshot (the module's order)."""
    _write_topology(writer)
    start_wall = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    progress(f"observe: attaching {backend.name} (target {target.kind} {target.spec}) ...")
    live_ts = backend.start(workdir)
    if target.kind == "command":
        target.launch()
    leftovers.write_owner(workdir, {"live_ts": live_ts, "start_wall": start_wall.isoformat(),
                                    "target_tgids": sorted(target.tgids),
                                    "tracer_version": backend.version()})
    snapper = _Snapshotter(writer)
    snapper.take(target.tgids, "start")
    titles = TitleWatch()
    writer.insert("process_title", titles.poll(target.tgids))
    progress(f"observe: tracing live; target has {len(target.tgids)} process(es), "
             f"{len(snapper.seen_tids)} thread(s)"
             + (f"; {duration_s:g} s" if duration_s else "; until Ctrl-C or the target exits"))
    # The live loss is only what the tracer reports while running; the final figure
    # adds the drop counters read at stop and the gaps in each CPU's switch sequence,
    # which can only be counted once the events are sorted. Said once, so the two
    # numbers never look like a contradiction (a newcomer saw "0 lost", then "659 lost").
    progress("observe: live progress counts the losses the tracer reports while it runs; the "
             "final figure adds its drop counters read at stop and gaps in the switch sequence")
    return _Live(live_ts, start_wall, snapper, titles)


def _trace(target: Target, writer: CaptureWriter, backend: TracerBackend, live: _Live, *,
           duration_s: float | None, progress: Progress, interrupted: list[int]) -> _Traced:
    """Poll and ingest until the duration passes, Ctrl-C (`interrupted`), or the tracer or the
    target ends; scan /proc for new threads when the tracer saw task activity (or a backstop)."""
    traced = _Traced()
    live_ts, snapper = live.live_ts, live.snapper
    started = time.monotonic()
    deadline = _deadline(live_ts, duration_s)
    next_scan = next_report = started
    next_backstop = started + SCAN_BACKSTOP_S
    # one scan first in any case: processes that joined between choosing the target and tracing
    # going live left no birth record
    scan_wanted = True
    while not interrupted:
        time.sleep(_pause(deadline))
        if deadline is not None and time.monotonic() >= deadline:
            break   # before this round's work: ingest and scans can take seconds on a busy host
        chunk = backend.poll()
        traced.events += _ingest(writer, chunk)
        traced.lost_reported += sum(chunk.lost)
        activity = backend.task_activity()
        scan_wanted = scan_wanted or activity is None or target.may_have_grown(activity)
        now = time.monotonic()
        if now >= next_scan and (scan_wanted or now >= next_backstop):
            target.refresh()
            snapper.take(target.tgids, "scan", only_new=True)
            scan_wanted = False
            next_scan = now + SCAN_INTERVAL_S
            next_backstop = now + SCAN_BACKSTOP_S
        writer.insert("process_title", live.titles.poll(target.tgids))
        if now >= next_report + 5:
            next_report = now
            progress(f"observe: {now - live_ts / 1e9:5.1f} s, {traced.events + backend.pending():,} events, "
                     f"{traced.lost_reported:,} reported lost so far")
        if not backend.alive():
            traced.end_reason = "tracer-failed"
            traced.warnings.append("the tracer stopped unexpectedly; the capture keeps what it recorded")
            break
        if not target.alive():
            traced.end_reason = "target-exited"
            break
    return traced


def _stop(target: Target, writer: CaptureWriter, backend: TracerBackend, live: _Live, traced: _Traced, *,
          progress: Progress) -> CaptureResult:
    """The end snapshot while tracing is live, then the tracer stopped and drained, then the file."""
    live.snapper.take(target.tgids, "end")
    titles = live.titles
    writer.insert("process_title", titles.poll(target.tgids))
    if titles.reads:
        progress(f"observe: process titles: {titles.reads:,} reads, "
                 f"{titles.read_ns / titles.reads / 1000:.1f} us each")
    progress(f"observe: stopping {backend.name} and draining its buffers ...")
    chunk, report = backend.stop()
    events = traced.events + _ingest(writer, chunk)
    events += backend.drain_into(writer)   # a backend that deferred ingest hands over the rest
    progress(f"observe: {events:,} events; building thread, slice and state tables ...")
    lost_reported = traced.lost_reported + sum(chunk.lost)
    target.refresh()
    _name_silent_tasks(writer)
    target.stop_launched()
    return _finish(writer, backend, target, report=report, live_ts=live.live_ts,
                   start_wall=live.start_wall, events=events, lost_reported=lost_reported,
                   end_reason=traced.end_reason, warnings=traced.warnings,
                   target_threads=len(live.snapper.seen_tids))


def _deadline(live_ts: int, duration_s: float | None) -> float | None:
    """When a capture of `duration_s` ends, on time.monotonic()'s clock (None: no duration).

    Counted from the moment tracing went live (`live_ts`, CLOCK_MONOTONIC ns, the capture's
    start_ts), not from when the loop began: launching the command and the first /proc snapshot
    happen inside the traced window, and on a busy host they took 1.4-8.7 s, which every capture
    then recorded on top of the duration asked for.
    """
    return None if duration_s is None else live_ts / 1e9 + duration_s


def _pause(deadline: float | None) -> float:
    """The loop's sleep: a poll interval, never past the deadline."""
    if deadline is None:
        return POLL_INTERVAL_S
    return min(POLL_INTERVAL_S, max(deadline - time.monotonic(), 0.0))


def _ingest(writer: CaptureWriter, chunk: ParsedChunk) -> int:
    count = 0
    for table, batch in chunk.tables.items():
        writer.append(table, batch)
        if table in EVENT_TABLES:
            count += batch.num_rows
    if count:
        writer.checkpoint()
    return count


def _sql(name: str) -> str:
    return statement("threadwise.observe", "sql/capture.sql", name)


def _name_silent_tasks(writer: CaptureWriter) -> None:
    """Name such tasks from /proc while they still exist (tgid and comm as of now)."""
    now = time.monotonic_ns()
    rows = []
    silent = [tid for (tid,) in writer.con.execute(_sql("silent_tasks")).fetchall()]
    leaders: set[int] = set()
    for tid in silent:
        identity = procfs.task_identity(tid)
        if identity is not None:
            rows.append((now, tid, identity[0], identity[1]))
            leaders.add(identity[0])
    # their process leaders too, so the process table can name the process
    for tgid in sorted(leaders - set(silent)):
        identity = procfs.task_identity(tgid)
        if identity is not None:
            rows.append((now, tgid, identity[0], identity[1]))
    writer.append("raw_task_seen", table_from_rows("raw_task_seen", rows))


def _write_topology(writer: CaptureWriter) -> None:
    writer.insert("cpu_topology", read_topology())


def _finish(writer: CaptureWriter, backend: TracerBackend, target: Target, *, report: TracerReport,
            live_ts: int, start_wall: dt.datetime, events: int, lost_reported: int,
            end_reason: str, warnings: list[str], target_threads: int) -> CaptureResult:
    # Loss, two independent ways: the tracer's own reports, and kernel counts
    # minus what reached the tables. The larger is stored; both are kept.
    counted = [TracerCount(name, report.kernel_counts.get(name, 0), writer.rows[table],
                           None if report.dropped is None else report.dropped.get(name, 0))
               for name, table in COUNTED.items()]
    missing = sum(max(0, c.kernel - c.ingested) for c in counted)
    writer.insert("tracer_counts", counted)
    if not report.kernel_counts:
        warnings.append("the tracer reported no kernel event counts; loss is only what it reported")
    if report.unparsed:
        warnings.append(f"{report.unparsed} tracer lines were not understood, e.g. "
                        f"{report.unparsed_samples[:2]}")
    events_lost = max(lost_reported, missing)
    if lost_reported:
        writer.insert("raw_lost", [LossReport(report.end_ts or live_ts, f"{backend.name} reported",
                                              lost_reported)])
    # The window ends where the kernel side stopped; if that was never confirmed
    # (the tracer died or hung), at the last event recorded, never later.
    end_ts = report.end_ts
    first_event, last_event = writer.con.execute(_sql("switch_span")).fetchall()[0]
    if end_ts is None:
        warnings.append("the tracer never confirmed the stop; the capture ends at its last event")
        end_ts = last_event or report.stop_requested_ts or time.monotonic_ns()
    start_ts = min(live_ts, first_event) if first_event else live_ts
    counted_text = (f"kernel counted {sum(c.kernel for c in counted)}, "
                    f"ingested {sum(c.ingested for c in counted)}")
    if report.dropped is not None:
        loss_detail = (f"{backend.name} dropped {sum(report.dropped.values())} (exact, rings full), "
                       f"missed {sum((report.missed or {}).values())} (recursion guard); {counted_text}")
    else:
        loss_detail = f"{backend.name} reported {lost_reported}; {counted_text}"
    if end_reason == "target-exited" and target.kind != "command":
        warnings.append("the target exited during the capture; the capture keeps what was recorded")
    # a pod's CPU budget, read as the capture ends (the cgroup's members are all known by then)
    limit = (procfs.cgroup_cpu_limit(target.cgroup, sorted(target.tgids))
             if target.kind == "cgroup" and target.cgroup else None)
    writer.insert("capture", [CaptureMeta(
        cgroup_cpu_quota_us=limit.quota_us if limit else None,
        cgroup_cpu_period_us=limit.period_us if limit else None,
        cgroup_cpu_source=limit.source if limit else None,
        capture_id=str(uuid.uuid4()), schema_version=SCHEMA_VERSION, host=socket.gethostname(),
        kernel_release=os.uname().release, start_wall=start_wall, start_ts=start_ts, end_ts=end_ts,
        duration_ns=end_ts - start_ts, target_kind=target.kind, target_spec=target.spec,
        target_tgids=sorted(target.tgids), tracer_backend=backend.name,
        tracer_version=backend.version(), events_recorded=events, events_lost=events_lost,
        loss_detail=loss_detail, end_reason=end_reason, notes="; ".join(warnings) or None)])
    path = writer.finalize()
    with contextlib.suppress(Exception):
        os.chmod(path, 0o644)
    # finalize adds the switch-chain gaps it found to the loss
    with open_capture(path) as con:
        events_lost, switch_gaps = con.execute(_sql("final_loss")).fetchall()[0]
    result = CaptureResult(path, (end_ts - start_ts) / 1e9, events, events_lost, end_reason,
                           target_threads, warnings, switch_gaps)
    if end_reason == "tracer-failed":
        raise TracerError(f"the tracer failed: {report.stderr_tail or 'no message'}; "
                          f"what was recorded is kept in {path}")
    if end_reason == "target-exited" and target.kind != "command":
        raise TargetError(f"the target exited after {result.duration_s:.1f} s; "
                          f"the capture up to then is kept in {path}")
    return result
