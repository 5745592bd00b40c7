"""Export a capture as a Perfetto protobuf trace (`threadwise export --format perfetto`).

Problem: people who tune schedulers read traces in the Perfetto UI. A capture
holds the kernel's own sched_switch/sched_waking stream of every CPU, so the
export should be that stream as Perfetto's ftrace data source writes it
(per-CPU FtraceEventBundles), with process and thread names and the loss,
written with the perfetto package's own protos. It must stream: a capture of
10 million events exports in bounded memory.

Approach: one time-ordered query (switches before wakings at equal times)
read as Arrow batches; each batch is split by CPU with numpy and appended to
that CPU's open bundle, which is written out as one TracePacket once it holds
`bundle_events` events. Inside a bundle most events use Perfetto's
compact_sched encoding (columnar, delta-encoded timestamps, interned comms),
which is several times smaller than one FtraceEvent per event; it leaves out
what the kernel's stream implies, so an event is written in full exactly
where that implication would be wrong:
- a sched_switch is compact when its prev is the previous switch's next on
  that CPU with that priority (the chain the compact form implies); else
  (the first switch of a CPU, a switch-chain gap) it is a full FtraceEvent,
  and a gap marks its bundle `lost_events`;
- a sched_waking is compact when the capture recorded its context (migration 7)
  and the task on the CPU then is the one the switches say runs there (compact
  wakings name no waker: the running task, or none when `waking_common_flags`
  say interrupt context); its context goes into those flags as the kernel's
  trace events carry it (hard IRQ 0x08, softirq 0x10, NMI 0x40). Any other
  waking, and every sched_wakeup_new, is a full FtraceEvent: `pid` the task on
  the CPU and `common_flags` the context where recorded, else `pid` the waker
  and no flags (an importer then knows no context, as in the capture).
So every event comes back with its timestamp, CPU, tids, prev_state and
priorities (import_perfetto.py decodes both forms). Migrations, births,
exits and renames follow as full events in their own bundles. Names go in one
ProcessTree packet (every thread instance and process of the capture),
topology as SystemInfo.num_cpus and a CpuInfo packet, the capture window as
FtraceStats START/END packets, and the tracer's loss (events_lost minus the
switch-chain gaps, which an importer finds again) as the first CPU's overrun
in END.

A capture does not record which profile was applied while it was taken. The
caller may say (`layers`, data: each thread's layer under that profile, which
the CLI has synthesize place with the compiled config's own matchers, from
the threads `export_threads` lists); each placed thread gets a track named
`layer <name>` holding one slice over the capture with a `layer` arg.
observe knows no profiles, so it never imports synthesize.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from threadwise.observe.interop.trace_io import atomic_output, check_output, write_packet
from threadwise.observe.store import open_capture
from threadwise.sqlfiles import statement

# Kernel trace flags (common_flags) of each wake context code (tracers/sched.h: task, softirq,
# hardirq, NMI).
CONTEXT_FLAGS = np.array([0, 0x10, 0x08, 0x40], np.uint32)
UNKNOWN_WAKEE_PRIO = 120


def _sql(name: str) -> str:
    return statement("threadwise.observe", "sql/interop.sql", name)


def _protos():  # noqa: ANN202 - the generated module
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


@dataclass
class ExportResult:
    """What `export_perfetto` wrote."""

    path: Path
    bytes_written: int = 0
    packets: int = 0
    switches: int = 0
    wakings: int = 0
    compact_switches: int = 0
    compact_wakings: int = 0
    migrations: int = 0
    task_events: int = 0
    threads: int = 0
    processes: int = 0
    lost: int = 0
    layers: int = 0
    seconds: float = 0.0

    @property
    def events(self) -> int:
        return self.switches + self.wakings + self.migrations + self.task_events


@dataclass
class _Bundle:
    """One CPU's FtraceEventBundle being filled: compact columns and full events, in time order."""

    cpu: int
    switch_ts: list[np.ndarray] = field(default_factory=list)
    switch_state: list[np.ndarray] = field(default_factory=list)
    switch_next: list[np.ndarray] = field(default_factory=list)
    switch_prio: list[np.ndarray] = field(default_factory=list)
    switch_comm: list[np.ndarray] = field(default_factory=list)
    waking_ts: list[np.ndarray] = field(default_factory=list)
    waking_pid: list[np.ndarray] = field(default_factory=list)
    waking_target: list[np.ndarray] = field(default_factory=list)
    waking_comm: list[np.ndarray] = field(default_factory=list)
    waking_flags: list[np.ndarray] = field(default_factory=list)
    # The TracePacket this bundle becomes; full FtraceEvents are added to it in place (building
    # each event apart and copying it in cost 4x as much).
    packet: object = None
    intern: dict[str, int] = field(default_factory=dict)
    events: int = 0
    lost: bool = False

    def comm_indexes(self, tids: np.ndarray, names: Callable[[int], str]) -> np.ndarray:
        unique, inverse = np.unique(tids, return_inverse=True)
        codes = np.array([self.intern.setdefault(names(int(tid)), len(self.intern)) for tid in unique],
                         dtype=np.uint32)
        return codes[inverse] if len(unique) else np.zeros(0, np.uint32)


def _deltas(parts: list[np.ndarray]) -> list[int]:
    stamps = np.concatenate(parts).astype(np.int64)
    return np.diff(stamps, prepend=0).tolist()


class _TraceWriter:
    """Per-CPU bundles in, framed TracePackets out."""

    def __init__(self, handle, result: ExportResult, bundle_events: int) -> None:  # noqa: ANN001
        self.pb = _protos()
        self.handle = handle
        self.result = result
        self.bundle_events = bundle_events
        self.bundles: dict[int, _Bundle] = {}

    def packet(self, packet) -> None:  # noqa: ANN001
        packet.trusted_packet_sequence_id = 1
        self.result.bytes_written += write_packet(self.handle, packet.SerializeToString())
        self.result.packets += 1

    def bundle(self, cpu: int) -> _Bundle:
        found = self.bundles.get(cpu)
        if found is None:
            found = self.bundles[cpu] = _Bundle(cpu, packet=self.pb.TracePacket())
        return found

    def added(self, bundle: _Bundle, count: int) -> None:
        bundle.events += count
        if bundle.events >= self.bundle_events:
            self.flush(bundle)

    def flush(self, bundle: _Bundle) -> None:
        if not bundle.events:
            return
        packet = bundle.packet
        out = packet.ftrace_events
        out.cpu = bundle.cpu
        if bundle.lost:
            out.lost_events = True
        if bundle.switch_ts or bundle.waking_ts:
            compact = out.compact_sched
            compact.intern_table.extend(sorted(bundle.intern, key=bundle.intern.__getitem__))
            if bundle.switch_ts:
                compact.switch_timestamp.extend(_deltas(bundle.switch_ts))
                compact.switch_prev_state.extend(np.concatenate(bundle.switch_state).tolist())
                compact.switch_next_pid.extend(np.concatenate(bundle.switch_next).tolist())
                compact.switch_next_prio.extend(np.concatenate(bundle.switch_prio).tolist())
                compact.switch_next_comm_index.extend(np.concatenate(bundle.switch_comm).tolist())
            if bundle.waking_ts:
                compact.waking_timestamp.extend(_deltas(bundle.waking_ts))
                compact.waking_pid.extend(np.concatenate(bundle.waking_pid).tolist())
                compact.waking_target_cpu.extend(np.concatenate(bundle.waking_target).tolist())
                count = sum(len(part) for part in bundle.waking_pid)
                compact.waking_prio.extend([UNKNOWN_WAKEE_PRIO] * count)
                compact.waking_comm_index.extend(np.concatenate(bundle.waking_comm).tolist())
                compact.waking_common_flags.extend(np.concatenate(bundle.waking_flags).tolist())
        self.packet(packet)
        self.bundles[bundle.cpu] = _Bundle(bundle.cpu, packet=self.pb.TracePacket())

    def flush_all(self) -> None:
        for bundle in list(self.bundles.values()):
            self.flush(bundle)


class _SchedStream:
    """Turns time-ordered batches of switches and wakings into bundle contents."""

    def __init__(self, writer: _TraceWriter, names: dict[int, str]) -> None:
        self.writer = writer
        self.pb = writer.pb
        self.names = names
        self.result = writer.result
        # Per CPU: the last switch's next tid and next prio (the running task), once known.
        self.running: dict[int, tuple[int, int]] = {}

    def name(self, tid: int) -> str:
        return "swapper" if tid == 0 else self.names.get(tid, "")

    def batch(self, columns: dict[str, np.ndarray]) -> None:
        cpus = columns["cpu"]
        for cpu in np.unique(cpus).tolist():
            mine = cpus == cpu
            rows = {key: value[mine] for key, value in columns.items()}
            switching = rows["kind"] == 0
            before = self.running.get(cpu)
            self._switches(cpu, {key: value[switching] for key, value in rows.items()})
            self._wakings(cpu, {key: value[~switching] for key, value in rows.items()},
                          {key: value[switching] for key, value in rows.items()}, before)
            # Flushed only after both: a bundle's wakings must see the switches before them.
            self.writer.added(self.writer.bundle(cpu), len(rows["ts"]))

    def _switches(self, cpu: int, sw: dict[str, np.ndarray]) -> None:
        count = len(sw["ts"])
        if not count:
            return
        bundle = self.writer.bundle(cpu)
        prev, nxt, prev_prio, next_prio = sw["tid_a"], sw["tid_b"], sw["prio_a"], sw["prio_b"]
        known = self.running.get(cpu)
        expected_prev = np.concatenate(([known[0] if known else -1], nxt[:-1]))
        expected_prio = np.concatenate(([known[1] if known else -1], next_prio[:-1]))
        chained = prev == expected_prev
        compact = chained & (prev_prio == expected_prio)
        gaps = ~chained
        if known is None:
            gaps[0] = False            # the first switch of a CPU: nothing to chain to
        self.running[cpu] = (int(nxt[-1]), int(next_prio[-1]))
        self.result.switches += count
        self.result.compact_switches += int(compact.sum())
        if gaps.any():
            bundle.lost = True
        # Full events and compact columns apart: the importer merges them by ts.
        events = bundle.packet.ftrace_events.event
        for index in np.flatnonzero(~compact).tolist():
            event = events.add(timestamp=int(sw["ts"][index]), pid=int(prev[index]))
            switch = event.sched_switch
            switch.prev_pid = int(prev[index])
            switch.prev_comm = self.name(int(prev[index]))
            switch.prev_prio = int(prev_prio[index])
            switch.prev_state = int(sw["state"][index])
            switch.next_pid = int(nxt[index])
            switch.next_comm = self.name(int(nxt[index]))
            switch.next_prio = int(next_prio[index])
        if compact.any():
            bundle.switch_ts.append(sw["ts"][compact])
            bundle.switch_state.append(sw["state"][compact])
            bundle.switch_next.append(nxt[compact])
            bundle.switch_prio.append(next_prio[compact])
            bundle.switch_comm.append(bundle.comm_indexes(nxt[compact], self.name))

    def _wakings(self, cpu: int, wk: dict[str, np.ndarray], sw: dict[str, np.ndarray],
                 before: tuple[int, int] | None) -> None:
        count = len(wk["ts"])
        if not count:
            return
        bundle = self.writer.bundle(cpu)
        # The task running on this CPU at each waking: the latest switch at or before it.
        latest = np.searchsorted(sw["ts"], wk["ts"], side="right") - 1
        running = np.where(latest >= 0, sw["tid_b"][np.maximum(latest, 0)] if len(sw["ts"]) else -1,
                           before[0] if before else -1)
        waker, wakee, is_new = wk["tid_a"], wk["tid_b"], wk["state"] != 0
        known = wk["context"] >= 0
        current = wk["current"]
        flags = CONTEXT_FLAGS[np.where(known, wk["context"], 0)]
        compact = ~is_new & known & (current == running)
        self.result.wakings += count
        self.result.compact_wakings += int(compact.sum())
        events = bundle.packet.ftrace_events.event
        for index in np.flatnonzero(~compact).tolist():
            if known[index]:
                event = events.add(timestamp=int(wk["ts"][index]), pid=int(current[index]),
                                   common_flags=int(flags[index]))
            else:
                event = events.add(timestamp=int(wk["ts"][index]), pid=int(waker[index]))
            body = event.sched_wakeup_new if is_new[index] else event.sched_waking
            body.pid = int(wakee[index])
            body.comm = self.name(int(wakee[index]))
            body.prio = UNKNOWN_WAKEE_PRIO
            body.success = 1
            body.target_cpu = int(wk["prio_a"][index])
        if compact.any():
            bundle.waking_ts.append(wk["ts"][compact])
            bundle.waking_pid.append(wakee[compact])
            bundle.waking_target.append(wk["prio_a"][compact])
            bundle.waking_comm.append(bundle.comm_indexes(wakee[compact], self.name))
            bundle.waking_flags.append(flags[compact])


def _numpy(batch) -> dict[str, np.ndarray]:  # noqa: ANN001 - pyarrow RecordBatch
    return {name: batch.column(i).to_numpy(zero_copy_only=False) for i, name in enumerate(batch.schema.names)}


# A capture's thread as export names it: (tid, tgid, its name, its process's name).
ThreadName = tuple[int, int, str, str]


@dataclass(frozen=True)
class ThreadLayers:
    """Each thread's layer under the profile applied while the capture was taken, as placed by
    the caller (observe knows no profiles)."""

    profile: str                            # the profile placed by: each layer slice's `profile` arg
    layer_of: dict[tuple[int, int], str]    # (tid, tgid) -> layer name; threads left out get no track


def export_threads(capture: Path) -> tuple[list[ThreadName], int]:
    """The capture's threads as the export names them, and its CPU count: what a caller needs to
    place them in a profile's layers (`ThreadLayers`)."""
    with open_capture(capture) as con:
        cpus = con.execute(_sql("export_cpus")).fetchall()
        threads = con.execute(_sql("export_threads")).fetchall()
    return [(tid, tgid, name, process) for tid, tgid, name, _start, process in threads], len(cpus)


def _layer_tracks(pb, *, start_ts: int, end_ts: int, threads: list[ThreadName],  # noqa: ANN001
                  layers: ThreadLayers) -> list:
    """A `layer NAME` track per thread, with one slice (arg `layer`) over the capture."""
    packets = []
    for index, (tid, tgid, name, _process) in enumerate(threads):
        layer = layers.layer_of.get((tid, tgid))
        if layer is None:
            continue
        uuid = 0x7477_0000_0000 + index
        packet = pb.TracePacket(timestamp=start_ts)
        packet.track_descriptor.uuid = uuid
        packet.track_descriptor.name = f"layer {layer}"
        packet.track_descriptor.thread.pid = tgid
        packet.track_descriptor.thread.tid = tid
        packet.track_descriptor.thread.thread_name = name
        packets.append(packet)
        begin = pb.TracePacket(timestamp=start_ts)
        begin.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        begin.track_event.track_uuid = uuid
        begin.track_event.name = f"layer {layer}"
        begin.track_event.debug_annotations.add(name="layer", string_value=layer)
        begin.track_event.debug_annotations.add(name="profile", string_value=layers.profile)
        packets.append(begin)
        end = pb.TracePacket(timestamp=end_ts)
        end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        end.track_event.track_uuid = uuid
        packets.append(end)
    return packets


def export_perfetto(capture: Path, output: Path, *, force: bool = False, batch_rows: int = 65_536,
                    bundle_events: int = 16_384, layers: ThreadLayers | None = None,
                    progress: Callable[[str], None] | None = None) -> ExportResult:
    """Write `capture` as a Perfetto trace at `output` (atomically; --force to replace); with
    `layers`, each placed thread's layer as a named track of the thread."""
    check_output(output, force=force, what="trace")
    began = time.monotonic()
    pb = _protos()
    result = ExportResult(path=output)
    with open_capture(capture) as con, atomic_output(output) as handle:
        con.execute(_sql("export_limits"))
        meta = con.execute(_sql("export_capture")).fetchone()
        start_ts, end_ts, host, kernel, events_lost, switch_gaps, backend = meta
        cpus = [row[0] for row in con.execute(_sql("export_cpus")).fetchall()]
        threads = con.execute(_sql("export_threads")).fetchall()
        processes = con.execute(_sql("export_processes")).fetchall()
        writer = _TraceWriter(handle, result, bundle_events)

        system = pb.TracePacket(timestamp=start_ts)
        system.system_info.utsname.sysname = "Linux"
        system.system_info.utsname.release = kernel or ""
        system.system_info.machine_name = host or ""
        system.system_info.num_cpus = len(cpus)
        writer.packet(system)
        cpu_info = pb.TracePacket(timestamp=start_ts)
        for cpu in cpus:
            cpu_info.cpu_info.cpus.add(processor=f"cpu{cpu} ({backend} capture)")
        writer.packet(cpu_info)

        names: dict[int, str] = {}
        tree = pb.TracePacket(timestamp=start_ts)
        for pid, name, cmdline in processes:
            process = tree.process_tree.processes.add(pid=pid, ppid=0)
            if cmdline:
                process.cmdline.extend(cmdline.split(" "))
            else:
                process.cmdline.append(name)
                process.cmdline_is_comm = True
        for tid, tgid, name, _start, _process in threads:
            tree.process_tree.threads.add(tid=tid, tgid=tgid, name=name)
            names[tid] = name       # the latest instance of a reused tid names its events
        writer.packet(tree)
        result.threads, result.processes = len(threads), len(processes)
        if layers is not None:
            named = [(tid, tgid, name, process) for tid, tgid, name, _start, process in threads]
            for index, packet in enumerate(_layer_tracks(pb, start_ts=start_ts, end_ts=end_ts, threads=named,
                                                          layers=layers)):
                packet.trusted_packet_sequence_id = 2
                if index == 0:
                    packet.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                result.bytes_written += write_packet(handle, packet.SerializeToString())
                result.packets += 1
            result.layers = len(set(layers.layer_of.values()))

        tracer_loss = max(int(events_lost) - int(switch_gaps), 0)
        result.lost = tracer_loss
        writer.packet(_stats(pb, start_ts, cpus, 1, 0))

        stream = _SchedStream(writer, names)
        reader = con.sql(_sql("export_sched_stream")).to_arrow_reader(batch_rows)
        for batch in reader:
            stream.batch(_numpy(batch))
            if progress:
                progress(f"export: {result.switches:,} switches, {result.wakings:,} wakings")
        writer.flush_all()

        reader = con.sql(_sql("export_migrations")).to_arrow_reader(batch_rows)
        for batch in reader:
            _migrations(writer, _numpy(batch), names)
        _task_events(writer, con.execute(_sql("export_task_events")).fetchall())
        writer.flush_all()
        writer.packet(_stats(pb, end_ts, cpus, 2, tracer_loss))
    result.seconds = time.monotonic() - began
    return result


def _stats(pb, ts: int, cpus: list[int], phase: int, overrun: int):  # noqa: ANN001, ANN202
    """FtraceStats at the start (phase 1) or end (2) of the capture; the loss on the first CPU."""
    packet = pb.TracePacket(timestamp=ts)
    packet.ftrace_stats.phase = phase
    for index, cpu in enumerate(cpus or [0]):
        packet.ftrace_stats.cpu_stats.add(cpu=cpu, overrun=overrun if index == 0 else 0)
    return packet


def _migrations(writer: _TraceWriter, rows: dict[str, np.ndarray], names: dict[int, str]) -> None:
    for ts, cpu, tid, orig, dest in zip(*(rows[key].tolist() for key in
                                          ("ts", "cpu", "tid", "orig_cpu", "dest_cpu")), strict=True):
        bundle = writer.bundle(cpu)
        event = bundle.packet.ftrace_events.event.add(timestamp=ts, pid=0)
        event.sched_migrate_task.pid = tid
        event.sched_migrate_task.comm = names.get(tid, "")
        event.sched_migrate_task.orig_cpu = orig
        event.sched_migrate_task.dest_cpu = dest
        writer.result.migrations += 1
        writer.added(bundle, 1)


def _task_events(writer: _TraceWriter, rows: list[tuple]) -> None:
    for ts, kind, cpu, actor, tid, flags, comm, old_comm in rows:
        bundle = writer.bundle(cpu)
        event = bundle.packet.ftrace_events.event.add(timestamp=ts, pid=actor)
        if kind == "new":
            event.task_newtask.pid = tid
            event.task_newtask.comm = comm
            event.task_newtask.clone_flags = flags
        elif kind == "exit":
            event.sched_process_exit.pid = tid
            event.sched_process_exit.tgid = int(flags)
            event.sched_process_exit.comm = comm
        else:
            event.task_rename.pid = tid
            event.task_rename.oldcomm = old_comm
            event.task_rename.newcomm = comm
        writer.result.task_events += 1
        writer.added(bundle, 1)
