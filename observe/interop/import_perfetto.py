"""Decode a Perfetto trace's Linux scheduling data into an ImportSink.

Problem: Perfetto writes the kernel's sched events as per-CPU
FtraceEventBundles, each holding full FtraceEvents and/or the compact_sched
encoding, which leaves out what the event stream implies: a compact switch
names only the next task (prev is the CPU's previous next), a compact waking
names no waker (the task running on that CPU, unless common_flags say
interrupt context). Traces can be large, and threadwise's own exports mix
both forms in one bundle (export_perfetto.py).

Approach: packets are read one at a time (trace_io.read_packets). Per
bundle, compact columns are decoded with numpy (cumulative timestamps,
interned comms), full sched_switch events are merged with them by
timestamp, and each compact switch takes its prev (tid, prio, comm) from the
previous switch on that CPU, carried across bundles; a CPU's first switch,
when compact, has an unknown prev (counted in the notes, taken as idle).
Compact wakings take the running task as waker (0 in interrupt context);
full ones their event's `pid` (0 too when their common_flags say interrupt context). common_flags
also give each waking's context (migration 7: the innermost of NMI, hard IRQ, softirq, else task)
and the running task, or `pid`, the task on the CPU; a waking without flags (a full event that
carries none, a compact bundle without waking_common_flags) has neither (NULL). sched_wakeup is
used only in a trace without sched_waking (both describe the same wakeups). ProcessTree packets name
threads and processes, task_newtask/sched_process_exit/task_rename give
births, exits and renames, FtraceStats START/END give the window and the
loss (overrun + dropped events, END minus START), SystemInfo and CpuInfo the
kernel, host and CPU count.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from threadwise.errors import InputError
from threadwise.observe.interop.sink import ImportSink, TraceSource
from threadwise.observe.interop.trace_io import read_packets
from threadwise.topology import synthetic_topology

# common_flags bits that mean "not in task context": hard IRQ, soft IRQ, NMI.
TRACE_FLAG_HARDIRQ, TRACE_FLAG_SOFTIRQ, TRACE_FLAG_NMI = 0x08, 0x10, 0x40
INTERRUPT_FLAGS = TRACE_FLAG_HARDIRQ | TRACE_FLAG_SOFTIRQ | TRACE_FLAG_NMI


def context_of(flags: np.ndarray) -> np.ndarray:
    """The wake context code (tracers/sched.h: 0 task, 1 softirq, 2 hardirq, 3 NMI) of kernel
    common_flags: the innermost context they name (a hard IRQ that interrupted a softirq sets both)."""
    return np.select([flags & TRACE_FLAG_NMI != 0, flags & TRACE_FLAG_HARDIRQ != 0,
                      flags & TRACE_FLAG_SOFTIRQ != 0], [3, 2, 1], 0).astype(np.int16)


@dataclass
class _Running:
    tid: int
    prio: int
    comm: str


@dataclass
class _Wakeups:
    """Full wakeup-like events of one bundle, as columns."""

    ts: list[int] = field(default_factory=list)
    waker: list[int] = field(default_factory=list)
    wakee: list[int] = field(default_factory=list)
    target: list[int] = field(default_factory=list)
    is_new: list[bool] = field(default_factory=list)
    flags: list[int | None] = field(default_factory=list)   # common_flags, None: the event has none

    def add(self, event, body, is_new: bool) -> None:  # noqa: ANN001 - FtraceEvent and its body
        self.ts.append(event.timestamp)
        self.waker.append(event.pid)
        self.wakee.append(body.pid)
        self.target.append(body.target_cpu)
        self.is_new.append(is_new)
        self.flags.append(event.common_flags if event.HasField("common_flags") else None)

    def columns(self, cpu: int) -> tuple[np.ndarray, ...]:
        """The sink's waking columns: a full event's pid is the task on the CPU, the waker unless
        its flags say interrupt context."""
        known = np.array([f is not None for f in self.flags], bool)
        flags = np.array([f or 0 for f in self.flags], np.uint32)
        pid = np.array(self.waker, np.int32)
        context = np.where(known, context_of(flags).astype(object), None)
        current = np.where(known, pid.astype(object), None)
        return (np.array(self.ts, np.int64), np.full(len(self.ts), cpu, np.int32),
                np.where(flags & INTERRUPT_FLAGS, 0, pid).astype(np.int32), np.array(self.wakee, np.int32),
                np.array(self.target, np.int32), np.array(self.is_new, bool), context, current)


# a full sched_switch: ts, prev tid, prev state, prev prio, next tid, next prio, prev comm, next comm
_FullSwitch = tuple[int, int, int, int, int, int, str, str]


@dataclass
class _FullEvents:
    """One bundle's full events that are merged with its compact ones or handed on as columns."""

    switches: list[_FullSwitch] = field(default_factory=list)
    wakeups: _Wakeups = field(default_factory=_Wakeups)  # sched_waking and sched_wakeup_new
    plain: _Wakeups = field(default_factory=_Wakeups)    # sched_wakeup: used only without sched_waking
    migrations: list[tuple[int, int, int, int]] = field(default_factory=list)


class _Switched(NamedTuple):
    """A bundle's switches in time order (what its compact wakings' wakers are read from)."""

    ts: np.ndarray
    nxt: np.ndarray
    before: _Running | None  # the task on the CPU before the bundle's first switch


class _SwitchColumns(NamedTuple):
    """A bundle's switches, full and compact, as columns sorted by time; a compact switch's prev
    columns are zero (`is_full` False) until carried from the switch before it."""

    ts: np.ndarray
    is_full: np.ndarray
    nxt: np.ndarray
    next_prio: np.ndarray
    state: np.ndarray
    next_comm: np.ndarray
    prev: np.ndarray
    prev_prio: np.ndarray
    prev_comm: np.ndarray


def _merged_switches(compact, full_switch: list[_FullSwitch]) -> _SwitchColumns:  # noqa: ANN001
    """The compact columns decoded (cumulative timestamps, interned comms) and merged with the full
    switches by timestamp (stable: a full switch before a compact one at the same time)."""
    c_count = len(compact.switch_timestamp) if compact is not None else 0
    f_count = len(full_switch)
    intern = np.array([*compact.intern_table, ""], dtype=object) if compact is not None else None
    f_cols = list(zip(*full_switch, strict=True)) if f_count else [()] * 8
    c_ts = (np.cumsum(np.array(compact.switch_timestamp, dtype=np.uint64)).astype(np.int64)
            if c_count else np.zeros(0, np.int64))
    columns = _SwitchColumns(
        ts=np.concatenate((np.array(f_cols[0], np.int64), c_ts)),
        is_full=np.concatenate((np.ones(f_count, bool), np.zeros(c_count, bool))),
        nxt=np.concatenate((np.array(f_cols[4], np.int32),
                            np.array(compact.switch_next_pid, np.int32) if c_count else [])),
        next_prio=np.concatenate((np.array(f_cols[5], np.int32),
                                  np.array(compact.switch_next_prio, np.int32) if c_count else [])),
        state=np.concatenate((np.array(f_cols[2], np.int64),
                              np.array(compact.switch_prev_state, np.int64) if c_count else [])),
        next_comm=np.concatenate((np.array(f_cols[7], dtype=object),
                                  intern[np.array(compact.switch_next_comm_index, np.int64)]
                                  if c_count else np.zeros(0, object))),
        prev=np.concatenate((np.array(f_cols[1], np.int32), np.zeros(c_count, np.int32))),
        prev_prio=np.concatenate((np.array(f_cols[3], np.int32), np.zeros(c_count, np.int32))),
        prev_comm=np.concatenate((np.array(f_cols[6], dtype=object), np.zeros(c_count, object))))
    order = np.argsort(columns.ts, kind="stable")
    return _SwitchColumns(*(column[order] for column in columns))


class _Decoder:
    def __init__(self, sink: ImportSink) -> None:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2

        self.pb = perfetto_trace_pb2
        self.sink = sink
        self.running: dict[int, _Running] = {}
        self.unknown_prev = 0
        self.lost_bundles = 0
        self.saw_waking = False
        self.plain_wakeups: list[tuple[np.ndarray, ...]] = []
        self.stats: dict[int, tuple[int, int]] = {}   # phase -> (ts, overrun + dropped)
        self.kernel = "unknown"
        self.host = "unknown"
        self.nr_cpus = 0
        self.packets = 0

    def packet(self, raw: bytes) -> None:
        try:
            packet = self.pb.TracePacket.FromString(raw)
        except Exception as error:   # protobuf's DecodeError: the bytes are no TracePacket
            raise InputError(f"packet {self.packets} does not parse as a Perfetto TracePacket ({error})",
                             hint="give a Perfetto protobuf trace, not a JSON or text trace") from error
        self.packets += 1
        if packet.HasField("ftrace_events"):
            self.bundle(packet.ftrace_events)
        elif packet.HasField("process_tree"):
            self.process_tree(packet)
        elif packet.HasField("ftrace_stats"):
            stats = packet.ftrace_stats
            lost = sum(cpu.overrun + cpu.dropped_events for cpu in stats.cpu_stats)
            self.stats[stats.phase] = (packet.timestamp, lost)
        elif packet.HasField("system_info"):
            info = packet.system_info
            self.kernel = info.utsname.release or self.kernel
            self.host = info.machine_name or self.host
            self.nr_cpus = max(self.nr_cpus, info.num_cpus)
        elif packet.HasField("cpu_info"):
            self.nr_cpus = max(self.nr_cpus, len(packet.cpu_info.cpus))

    def process_tree(self, packet) -> None:  # noqa: ANN001
        ts = packet.timestamp or None
        tree = packet.process_tree
        named = {thread.tid for thread in tree.threads}
        for thread in tree.threads:
            self.sink.thread(thread.tid, thread.tgid or None, thread.name or None, ts)
        for process in tree.processes:
            name = os.path.basename(process.cmdline[0])[:15] if process.cmdline else None
            self.sink.thread(process.pid, process.pid, None if process.pid in named else name, None)

    def bundle(self, bundle) -> None:  # noqa: ANN001
        cpu = bundle.cpu
        if bundle.lost_events:
            self.lost_bundles += 1
        full = self._full_events(bundle)
        compact = bundle.compact_sched if bundle.HasField("compact_sched") else None
        switched = self._switches(cpu, compact, full.switches)
        self._compact_wakings(cpu, compact, switched)
        for found, into_sink in ((full.wakeups, True), (full.plain, False)):
            if not found.ts:
                continue
            columns = found.columns(cpu)
            if into_sink:
                self.sink.wakings(*columns)
            else:
                self.plain_wakeups.append(columns)
        if full.migrations:
            m_ts, m_tid, m_orig, m_dest = (np.array(column) for column in zip(*full.migrations, strict=True))
            self.sink.migrations(m_ts.astype(np.int64), np.full(len(m_ts), cpu, np.int32),
                                 m_tid.astype(np.int32), m_orig.astype(np.int32), m_dest.astype(np.int32))

    def _full_events(self, bundle) -> _FullEvents:  # noqa: ANN001
        """The bundle's full events: switches, wakeups and migrations kept as columns for the
        bundle's merge; births, exits and renames handed to the sink as they come."""
        cpu = bundle.cpu
        full = _FullEvents()
        for event in bundle.event:
            kind = event.WhichOneof("event")
            ts = event.timestamp
            if kind == "sched_switch":
                sw = event.sched_switch
                full.switches.append((ts, sw.prev_pid, sw.prev_state, sw.prev_prio, sw.next_pid, sw.next_prio,
                                      sw.prev_comm, sw.next_comm))
            elif kind == "sched_waking":
                self.saw_waking = True
                full.wakeups.add(event, event.sched_waking, False)
            elif kind == "sched_wakeup_new":
                full.wakeups.add(event, event.sched_wakeup_new, True)
            elif kind == "sched_wakeup":
                full.plain.add(event, event.sched_wakeup, False)
            elif kind == "sched_migrate_task":
                body = event.sched_migrate_task
                full.migrations.append((ts, body.pid, body.orig_cpu, body.dest_cpu))
            elif kind == "task_newtask":
                body = event.task_newtask
                self.sink.birth(ts, cpu, event.pid, body.pid, body.clone_flags, body.comm)
            elif kind == "sched_process_exit":
                body = event.sched_process_exit
                self.sink.exit(ts, cpu, body.pid, body.tgid or None, body.comm)
            elif kind == "task_rename":
                body = event.task_rename
                self.sink.rename(ts, cpu, body.pid, body.oldcomm, body.newcomm)
        return full

    def _switches(self, cpu: int, compact, full_switch: list[_FullSwitch]) -> _Switched:  # noqa: ANN001
        """The bundle's switches, compact and full merged by time, to the sink; a compact switch's
        prev is the CPU's previous next, carried across bundles."""
        before = self.running.get(cpu)
        if not full_switch and (compact is None or not compact.switch_timestamp):
            return _Switched(np.zeros(0, np.int64), np.zeros(0, np.int64), before)
        sw = _merged_switches(compact, full_switch)
        if before is None and not sw.is_full[0]:
            self.unknown_prev += 1
            before = _Running(0, 120, "swapper")
        carried_tid = np.concatenate(([before.tid if before else 0], sw.nxt[:-1]))
        carried_prio = np.concatenate(([before.prio if before else 120], sw.next_prio[:-1]))
        carried_comm = np.concatenate((np.array([before.comm if before else ""], dtype=object),
                                       sw.next_comm[:-1]))
        prev = np.where(sw.is_full, sw.prev, carried_tid).astype(np.int32)
        prev_prio = np.where(sw.is_full, sw.prev_prio, carried_prio).astype(np.int32)
        prev_comm = np.where(sw.is_full, sw.prev_comm, carried_comm)
        self.running[cpu] = _Running(int(sw.nxt[-1]), int(sw.next_prio[-1]), str(sw.next_comm[-1]))
        self.sink.switches(sw.ts, np.full(len(sw.ts), cpu, np.int32), prev, sw.state, prev_prio, sw.nxt,
                           sw.next_prio, prev_comm, sw.next_comm)
        return _Switched(sw.ts, sw.nxt, before)

    def _compact_wakings(self, cpu: int, compact, switched: _Switched) -> None:  # noqa: ANN001
        """The bundle's compact wakings to the sink: the waker is the task running on the CPU at the
        time (0 in interrupt context), known from the bundle's switches."""
        w_count = len(compact.waking_timestamp) if compact is not None else 0
        if not w_count:
            return
        self.saw_waking = True
        ts, nxt, before = switched
        w_ts = np.cumsum(np.array(compact.waking_timestamp, dtype=np.uint64)).astype(np.int64)
        has_flags = len(compact.waking_common_flags) == w_count
        flags = (np.array(compact.waking_common_flags, np.uint32) if has_flags
                 else np.zeros(w_count, np.uint32))
        latest = np.searchsorted(ts, w_ts, side="right") - 1
        running = np.where(latest >= 0, nxt[np.maximum(latest, 0)] if len(ts) else 0,
                           before.tid if before else 0)
        waker = np.where(flags & INTERRUPT_FLAGS, 0, running).astype(np.int32)
        # the running task is on the CPU in any context; without flags nothing is known
        context = context_of(flags).astype(object) if has_flags else None
        current = running.astype(np.int32).astype(object) if has_flags else None
        self.sink.wakings(w_ts, np.full(w_count, cpu, np.int32), waker,
                          np.array(compact.waking_pid, np.int32),
                          np.array(compact.waking_target_cpu, np.int32), np.zeros(w_count, bool),
                          context, current)

    def finish(self, path: Path) -> TraceSource:
        if not self.saw_waking:
            for columns in self.plain_wakeups:
                self.sink.wakings(*columns)
        start, end = self.stats.get(1), self.stats.get(2)
        lost = max((end[1] if end else 0) - (start[1] if start else 0), 0)
        if lost:
            self.sink.lost(end[0] if end else (self.sink.last_ts or 0), "perfetto ftrace_stats overrun", lost)
        notes = []
        if self.unknown_prev:
            notes.append(f"{self.unknown_prev} CPU(s) began with a compact switch whose previous task the "
                         "trace does not name (taken as idle)")
        if not self.saw_waking and self.plain_wakeups:
            notes.append("wakeups from sched_wakeup (the trace has no sched_waking)")
        topology = (synthetic_topology(self.nr_cpus)
                    if self.nr_cpus and self.nr_cpus > max(self.sink.cpus, default=-1) else None)
        detail = (f"perfetto ftrace_stats: {lost} events overrun or dropped (END minus START)"
                  if start or end else "the trace has no ftrace_stats: loss unknown, counted as 0")
        if self.lost_bundles:
            detail += f"; {self.lost_bundles} bundle(s) flagged lost_events (switch-chain gaps found again)"
        return TraceSource(
            kind="perfetto", tracer_version="perfetto trace", host=self.host, kernel_release=self.kernel,
            topology=topology,
            topology_note=f"{self.nr_cpus} CPUs from the trace's system_info/cpu_info, SMT siblings unknown "
                          "(give --shape to name them)" if topology else "",
            window=(start[0] if start and start[0] else None, end[0] if end and end[0] else None),
            loss_detail=detail, notes=notes)


def decode_perfetto(path: Path, sink: ImportSink,
                    progress: Callable[[str], None] | None = None) -> TraceSource:
    decoder = _Decoder(sink)
    for raw in read_packets(path):
        decoder.packet(raw)
        if progress and decoder.packets % 200 == 0:
            progress(f"import: {decoder.packets:,} packets, {sink.counts['raw_sched_switch']:,} switches")
    return decoder.finish(path)
