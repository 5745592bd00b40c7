"""Decode a `perf sched record` recording (perf.data) into an ImportSink, through `perf script`.

Problem: perf.data is perf's own binary format, versioned with perf; the
reliable reader is the perf that wrote it (or a newer one). Its text output
must be read without guessing: comms contain spaces, sched_switch prints
prev_state as letters, and a wakeup's waker is not a tracepoint field but the
task the sample was taken in. Tasks, their tgids and renames are side-band
records (FORK/COMM/EXIT), synthesized at time 0 for tasks that existed when
recording began.

Approach: `perf report --header-only -I` gives the host, kernel, perf
version, recorded events (a recording without sched:sched_switch is refused)
and the CPU topology (`CPU N: Core ID c, Die ID d, Socket ID s`). `perf
script` runs with explicit fields (`-F comm,pid,tid,cpu,time,event,trace
--ns --show-task-events --show-lost-events`) and its lines are parsed as
they stream: a fixed head (`comm pid/tid [cpu] sec.ns:`) matched from the
right of the comm, then one anchored pattern per event whose comm fields are
matched up to the next known field name. prev_state letters map back to the
kernel's bits (S 1, D 2, T 4, t 8, X 16, Z 32, P 64, I 128, + preempted
0x100). Wakers are the sample's tid (perf cannot tell interrupt context from
the task it interrupted; said in the capture's notes). FORK records at a
time > 0 are births (CLONE_THREAD when the child's pid is the parent's),
COMM records renames (exec included, as the kernel's task_rename), EXIT
records exits; time-0 records only name tasks. LOST/LOST_SAMPLES records are
the loss carried forward.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np

from threadwise.errors import InputError, MissingTool
from threadwise.observe.interop.sink import ImportSink, TraceSource
from threadwise.observe.schema import CLONE_THREAD
from threadwise.topology import CpuInfo

SCRIPT_FIELDS = "comm,pid,tid,cpu,time,event,trace"
STATE_BITS = {"S": 1, "D": 2, "T": 4, "t": 8, "X": 16, "Z": 32, "P": 64, "I": 128}
PREEMPTED = 0x100
BATCH_ROWS = 200_000

_HEAD = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+\[(?P<cpu>\d+)\]\s+"
                   r"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<rest>.*)$")
_SWITCH = re.compile(r"prev_comm=(.*) prev_pid=(-?\d+) prev_prio=(-?\d+) prev_state=(\S+) ==> "
                     r"next_comm=(.*) next_pid=(-?\d+) next_prio=(-?\d+)\s*$")
_WAKE = re.compile(r"comm=(.*) pid=(-?\d+) prio=(-?\d+)(?: success=\d+)? target_cpu=(\d+)\s*$")
_MIGRATE = re.compile(r"comm=(.*) pid=(-?\d+) prio=(-?\d+) orig_cpu=(\d+) dest_cpu=(\d+)\s*$")
_TASK = re.compile(r"PERF_RECORD_(FORK|EXIT)\((-?\d+):(-?\d+)\):\((-?\d+):(-?\d+)\)")
_COMM = re.compile(r"PERF_RECORD_COMM( exec)?: (.*):(-?\d+)/(-?\d+)\s*$")
_LOST = re.compile(r"PERF_RECORD_LOST\S*.*?(\d+)\s*$")
_CPU = re.compile(r"^# CPU (\d+): Core ID (-?\d+),(?: Die ID (-?\d+),)? Socket ID (-?\d+)")
_HEADER = re.compile(r"^# ([a-z][a-z ]*?)\s*: (.*)$")


def prev_state_bits(text: str) -> int:
    """perf's printed prev_state (`S`, `R+`, `D|K`, ...) as the kernel's prev_state value."""
    bits = PREEMPTED if text.endswith("+") else 0
    for letter in text.rstrip("+").split("|"):
        bits |= STATE_BITS.get(letter, 0)
    return bits


def _perf() -> str:
    found = shutil.which("perf")
    if found is None:
        raise MissingTool("perf is not installed (needed to read perf.data)",
                          hint="apt-get install linux-perf (Debian) or your distribution's perf package")
    return found


def _header(path: Path) -> tuple[dict[str, str], list[str], list[CpuInfo]]:
    """perf's header: its `key : value` lines, the recorded event names, the topology."""
    done = subprocess.run([_perf(), "report", "--header-only", "-I", "-i", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or "# ========" not in done.stdout:
        why = (done.stderr.strip().splitlines() or ["no header"])[-1]
        raise InputError(f"{path} starts like a perf.data file but perf cannot read it: {why}",
                         hint="copy the file again (a recording cut short cannot be read), or read it "
                              "with the perf version that recorded it")
    fields: dict[str, str] = {}
    events: list[str] = []
    cpus: list[tuple[int, int, int]] = []
    for line in done.stdout.splitlines():
        if line.startswith("# event : name = "):
            events.append(line.removeprefix("# event : name = ").split(",", 1)[0].strip())
        elif match := _CPU.match(line):
            cpus.append((int(match.group(1)), int(match.group(2)), int(match.group(4))))
        elif match := _HEADER.match(line):
            fields.setdefault(match.group(1), match.group(2).strip())
    return fields, events, _topology(cpus)


def _topology(cpus: list[tuple[int, int, int]]) -> list[CpuInfo]:
    keys: dict[tuple[int, int], int] = {}
    for _cpu, core, socket in sorted(cpus):
        keys.setdefault((socket, core), len(keys))
    infos = []
    for cpu, core, socket in sorted(cpus):
        siblings = tuple(c for c, k, s in sorted(cpus) if (s, k) == (socket, core))
        package = tuple(c for c, _k, s in sorted(cpus) if s == socket)
        infos.append(CpuInfo(cpu, core, socket, keys[(socket, core)], siblings, socket, package, True))
    return infos


class _Columns:
    """Decoded rows of one kind, flushed to the sink as numpy columns."""

    def __init__(self, width: int) -> None:
        self.rows: list[list] = [[] for _ in range(width)]

    def add(self, *values: object) -> None:
        for column, value in zip(self.rows, values, strict=True):
            column.append(value)

    def __len__(self) -> int:
        return len(self.rows[0])

    def take(self) -> list[list]:
        rows, self.rows = self.rows, [[] for _ in self.rows]
        return rows


class _PerfDecoder:
    def __init__(self, sink: ImportSink) -> None:
        self.sink = sink
        self.switches = _Columns(9)
        self.wakings = _Columns(6)
        self.migrations = _Columns(5)
        self.comm: dict[int, str] = {}
        self.tgid_known: set[int] = set()
        self.lost = 0
        self.last_ts = 0
        self.unparsed = 0
        self.samples: list[str] = []
        self.lines = 0
        self.saw_waking = False

    def line(self, text: str) -> None:
        self.lines += 1
        head = _HEAD.match(text)
        if head is None:
            if text.strip():
                self._unparsed(text)
            return
        pid, tid, cpu = int(head["pid"]), int(head["tid"]), int(head["cpu"])
        ts = int(head["sec"]) * 1_000_000_000 + int(head["frac"].ljust(9, "0")[:9])
        rest = head["rest"]
        if rest.startswith("PERF_RECORD_"):
            self._record(ts, cpu, head["comm"], rest)
            return
        self.last_ts = max(self.last_ts, ts)
        if tid not in self.tgid_known and tid:
            self.tgid_known.add(tid)
            self.sink.thread(tid, pid, None)
        event, _, fields = rest.partition(": ")
        event = event.strip()
        if event == "sched:sched_switch":
            match = _SWITCH.search(fields)
            if match is None:
                self._unparsed(text)
                return
            prev_comm, prev, prev_prio, state, next_comm, nxt, next_prio = match.groups()
            self.switches.add(ts, cpu, int(prev), prev_state_bits(state), int(prev_prio), int(nxt),
                              int(next_prio), prev_comm, next_comm)
            if len(self.switches) >= BATCH_ROWS:
                self.flush()
        elif event in ("sched:sched_waking", "sched:sched_wakeup_new", "sched:sched_wakeup"):
            match = _WAKE.search(fields)
            if match is None:
                self._unparsed(text)
                return
            self.wakings.add(ts, cpu, tid, int(match.group(2)), int(match.group(4)),
                             event == "sched:sched_wakeup_new")
            self.saw_waking = self.saw_waking or event == "sched:sched_waking"
        elif event == "sched:sched_migrate_task":
            match = _MIGRATE.search(fields)
            if match is None:
                self._unparsed(text)
                return
            self.migrations.add(ts, cpu, int(match.group(2)), int(match.group(4)), int(match.group(5)))

    def _record(self, ts: int, cpu: int, comm: str, rest: str) -> None:
        if match := _TASK.match(rest):
            kind, pid, tid, ppid, ptid = match.group(1), *map(int, match.groups()[1:])
            self.sink.thread(tid, pid, None)
            self.tgid_known.add(tid)
            if ts == 0:
                return
            if kind == "FORK":
                parent_comm = self.comm.get(ptid, comm)
                self.sink.birth(ts, cpu, ptid, tid, CLONE_THREAD if pid == ppid else 0, parent_comm)
                self.comm[tid] = parent_comm
            else:
                self.sink.exit(ts, cpu, tid, pid, self.comm.get(tid, comm))
        elif match := _COMM.match(rest):
            name, pid, tid = match.group(2), int(match.group(3)), int(match.group(4))
            self.tgid_known.add(tid)
            if ts == 0:
                self.sink.thread(tid, pid, name, None)
            else:
                self.sink.thread(tid, pid, None)
                self.sink.rename(ts, cpu, tid, self.comm.get(tid, comm), name)
            self.comm[tid] = name
        elif match := _LOST.match(rest):
            self.lost += int(match.group(1))
        # other side-band records (MMAP, KSYMBOL, BPF_EVENT, ...) say nothing about scheduling

    def _unparsed(self, text: str) -> None:
        self.unparsed += 1
        if len(self.samples) < 3:
            self.samples.append(text[:160])

    def flush(self) -> None:
        if len(self.switches):
            ts, cpu, prev, state, pprio, nxt, nprio, pcomm, ncomm = self.switches.take()
            self.sink.switches(np.array(ts, np.int64), np.array(cpu, np.int32), np.array(prev, np.int32),
                               np.array(state, np.int64), np.array(pprio, np.int32), np.array(nxt, np.int32),
                               np.array(nprio, np.int32), np.array(pcomm, dtype=object),
                               np.array(ncomm, dtype=object))
        if len(self.wakings):
            ts, cpu, waker, wakee, target, is_new = self.wakings.take()
            self.sink.wakings(np.array(ts, np.int64), np.array(cpu, np.int32), np.array(waker, np.int32),
                              np.array(wakee, np.int32), np.array(target, np.int32), np.array(is_new, bool))
        if len(self.migrations):
            ts, cpu, tid, orig, dest = self.migrations.take()
            self.sink.migrations(np.array(ts, np.int64), np.array(cpu, np.int32), np.array(tid, np.int32),
                                 np.array(orig, np.int32), np.array(dest, np.int32))


def _captured_on(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text or "", "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None


def decode_perf(path: Path, sink: ImportSink, progress: Callable[[str], None] | None = None) -> TraceSource:
    fields, events, topology = _header(path)
    if "sched:sched_switch" not in events:
        raise InputError(
            f"{path} was recorded without the sched:sched_switch tracepoint "
            f"(events: {', '.join(events) or 'none'})",
            hint="record with `perf sched record -o perf.data -- CMD` (or `perf record -e sched:sched_switch "
                 "-e sched:sched_waking -e sched:sched_wakeup_new -e sched:sched_migrate_task ...`)")
    decoder = _PerfDecoder(sink)
    command = [_perf(), "script", "-i", str(path), "--ns", "-F", SCRIPT_FIELDS, "--show-task-events",
               "--show-lost-events"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", bufsize=1 << 20) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        for text in proc.stdout:
            decoder.line(text.rstrip("\n"))
            if progress and decoder.lines % 1_000_000 == 0:
                progress(f"import: {decoder.lines:,} perf script lines")
        decoder.flush()
        stderr = proc.stderr.read()
        status = proc.wait()
    if status != 0:
        why = (stderr.strip().splitlines() or [f"exit status {status}"])[-1]
        raise InputError(f"perf script could not read {path}: {why}",
                         hint="read it with the perf version that recorded it")
    if decoder.lost:
        sink.lost(decoder.last_ts, "perf PERF_RECORD_LOST", decoder.lost)
    notes = [f"recorded by: {fields.get('cmdline', 'unknown command')}",
             "wakers are the task a wakeup's sample was taken in (perf cannot tell interrupt context "
             "from the task it interrupted)"]
    if decoder.unparsed:
        notes.append(f"{decoder.unparsed} perf script line(s) not understood, e.g. {decoder.samples[0]!r}")
    if not decoder.saw_waking:
        notes.append("no sched_waking in the recording: wakeups from sched_wakeup")
    return TraceSource(
        kind="perf", tracer_version=f"perf {fields.get('perf version', 'unknown')}",
        host=fields.get("hostname", "unknown"), kernel_release=fields.get("os release", "unknown"),
        start_wall=_captured_on(fields.get("captured on")), topology=topology or None,
        topology_note="from perf.data's CPU_TOPOLOGY header" if topology else "",
        loss_detail=f"perf reported {decoder.lost} lost events or samples (PERF_RECORD_LOST*)",
        notes=notes)
