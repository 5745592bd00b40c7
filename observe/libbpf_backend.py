"""The libbpf backend: runs the C tracer (tracers/sched.c) and maps its binary record files.

The tracer appends fixed-size records to one file per layout in the work directory and says
on stdout when it is live, when it stopped, and what the kernel counted (seen and dropped, per
event kind and CPU). Polling reads whole new records (observe/records.py); nothing is parsed as
text. Drops are exact: a record the ring had no room for is counted in the kernel, so the
capture's loss from the tracer is `dropped`, and `seen - ingested == dropped` can be checked.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa

from threadwise.errors import MissingTool, PermissionProblem
from threadwise.observe import tracer_build
from threadwise.observe.backend import TaskActivity, TracerReport, kill_tracer, stderr_tail, wait_for_attach
from threadwise.observe.ingest import ingest_records
from threadwise.observe.records import RecordReader, TaskFollower
from threadwise.observe.store import CaptureWriter
from threadwise.observe.stream import ParsedChunk

# Rings: one per CPU (benchmarks/tracer_overhead.py measured per-CPU against one shared ring).
DEFAULT_RINGS = 0
DEFAULT_RING_KB = 8192   # per ring: ~200k switch records of headroom per CPU between drains
RING_BUDGET_KB = 256 * 1024   # all rings together; a machine with many CPUs gets smaller rings
STOP_TIMEOUT_S = 30.0
DEFER_BYTES = 256 << 20  # ~6M records: ingest during tracing only beyond this much on disk
SLICE_BYTES = 32 << 20   # per file and poll: bounds the observer's memory while it ingests
# BPF program -> the event kind it records (its recursion misses are events of that kind never seen)
PROGRAM_KIND = {"on_switch": "switch", "on_waking": "waking", "on_wakeup_new": "waking",
                "on_migrate": "migrate", "on_newtask": "new", "on_process_exit": "exit",
                "on_rename": "rename"}


def default_ring_kb(rings: int = DEFAULT_RINGS) -> int:
    """Per-ring size: DEFAULT_RING_KB, halved until all rings fit RING_BUDGET_KB (>= 1 MiB)."""
    count = rings or (os.cpu_count() or 1)
    size = DEFAULT_RING_KB
    while size > 1024 and size * count > RING_BUDGET_KB:
        size //= 2
    return size


class LibbpfBackend:
    name = "libbpf"

    def __init__(self, *, rings: int = DEFAULT_RINGS, ring_kb: int | None = None,
                 poll_ms: int = 100, wakeup_kb: int | None = None) -> None:
        self.rings = rings
        self.wakeup_kb = wakeup_kb  # None: half a ring
        self.defer_bytes = DEFER_BYTES
        self._stopped = False
        self.ring_kb = ring_kb or default_ring_kb(rings)
        self.poll_ms = poll_ms
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: RecordReader | None = None
        self._tasks: TaskFollower | None = None
        self._control = b""
        self._lines: list[str] = []
        self._err: Path | None = None
        self.binary: Path | None = None

    # -- prerequisites -------------------------------------------------------
    def check(self) -> None:
        if os.geteuid() != 0:
            raise PermissionProblem(
                "eBPF tracing needs root: the tracer loads BPF programs (CAP_BPF, CAP_PERFMON)",
                hint="run as root, e.g. sudo .venv/bin/threadwise observe ...")
        binary = tracer_build.binary_path()
        try:
            built = binary.is_file()
        except OSError:
            built = False
        if not built:
            raise MissingTool(f"the libbpf tracer is not built for these sources ({binary})",
                              hint="run make setup (or python -m threadwise.observe.tracer_build), "
                                   "or use --backend bpftrace")
        self.binary = binary

    def version(self) -> str:
        return f"threadwise-sched {tracer_build.source_hash()}"

    # -- lifecycle -------------------------------------------------------------
    def start(self, workdir: Path, *, attach_timeout_s: float = 60.0) -> int:
        if self.binary is None:
            self.check()
        assert self.binary is not None
        records = workdir / "records"
        records.mkdir()
        self._reader = RecordReader(records)
        self._tasks = TaskFollower(records / "task.bin")
        self._err = workdir / "tracer.err"
        with open(self._err, "wb") as err:
            self._proc = subprocess.Popen(
                [str(self.binary), "--out", str(records), "--rings", str(self.rings),
                 "--ring-kb", str(self.ring_kb), "--poll-ms", str(self.poll_ms),
                 *(["--wakeup-kb", str(self.wakeup_kb)] if self.wakeup_kb is not None else [])],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                start_new_session=True,  # the terminal's Ctrl-C is the observer's to handle
            )

        def live() -> int | None:
            lines = self._read_control(timeout_s=0.1 if self._proc.poll() is None else 0)
            return next((int(line.split()[1]) for line in lines if line.startswith("live ")), None)

        return wait_for_attach(self._proc, "the libbpf tracer", self._err, attach_timeout_s, live)

    def _read_control(self, *, timeout_s: float) -> list[str]:
        """Complete control lines that arrived on the tracer's stdout."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        new: list[str] = []
        while select.select([fd], [], [], timeout_s)[0]:
            data = os.read(fd, 65536)
            if not data:
                break
            self._control += data
            *lines, rest = self._control.split(b"\n")
            self._control = rest
            new += [line.decode(errors="replace") for line in lines]
            timeout_s = 0
        self._lines += new
        return new

    def poll(self) -> ParsedChunk:
        """Nothing until DEFER_BYTES of records are pending: ingest waits for the capture's end.

        Decoding and appending to DuckDB while tracing runs on the workload's CPUs (on 2 cores,
        several percent of its time); deferred, it costs the workload nothing. The files are
        the buffer, bounded by DEFER_BYTES on disk; a killed run is recoverable from them.
        """
        assert self._reader is not None
        if self._stopped:
            return ParsedChunk({})   # drain_into takes the rest
        if self.pending_bytes() < self.defer_bytes:
            return ParsedChunk({})
        return _chunk(self._reader.read(max_bytes=SLICE_BYTES))

    def drain_into(self, writer: CaptureWriter) -> int:
        """After stop: append every record not handed over yet (observe/ingest.py's fast path)."""
        assert self._reader is not None and self._stopped
        return ingest_records(self._reader, writer)

    def pending_bytes(self) -> int:
        assert self._reader is not None
        return sum(self._reader.trailing().values())

    def pending(self) -> int:
        """Records written by the tracer and not yet handed over (for progress lines)."""
        assert self._reader is not None
        return self._reader.pending_records()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def task_activity(self) -> TaskActivity:
        """Births and renames in task.bin since the last call (it trails the kernel by --poll-ms)."""
        assert self._tasks is not None
        return self._tasks.read()

    def stop(self) -> tuple[ParsedChunk, TracerReport]:
        """Stop tracing and report; the records still on disk follow through `drain_into`."""
        assert self._proc is not None and self._reader is not None
        stop_requested_ts = time.monotonic_ns()
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)  # the tracer sets `stopped`, drains, reports
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kill_tracer(self._proc)
        self._read_control(timeout_s=0)
        self._stopped = True
        end_ts, counts = None, {}
        for line in self._lines:
            if line.startswith("end "):
                end_ts = int(line.split()[1])
            elif line.startswith("counts "):
                counts = json.loads(line[len("counts "):])
        kernel_counts = {kind: value["seen"] for kind, value in counts.items()
                         if isinstance(value, dict) and "seen" in value and kind != "seen"}
        dropped = {kind: value["dropped"] for kind, value in counts.items()
                   if isinstance(value, dict) and "dropped" in value}
        chunk = ParsedChunk({})
        missed = {kind: 0 for kind in dropped}
        for program, count in counts.get("missed", {}).items():
            if program in PROGRAM_KIND:
                missed[PROGRAM_KIND[program]] = missed.get(PROGRAM_KIND[program], 0) + int(count)
        # never in the kernel counts: the program did not run (the kernel's recursion guard)
        total_lost = sum(dropped.values()) + sum(missed.values())
        if total_lost:
            chunk.lost.append(total_lost)
        trailing = self._reader.incomplete()
        report = TracerReport(
            end_ts=end_ts, stop_requested_ts=stop_requested_ts, kernel_counts=kernel_counts,
            dropped=dropped, missed=missed,
            unparsed=len(trailing),  # files that end in a partial record (a write cut short)
            unparsed_samples=[f"{name}: {size} bytes of an incomplete record"
                              for name, size in trailing.items()],
            stderr_tail=stderr_tail(self._err),
        )
        return chunk, report


def _chunk(parts: dict[str, list[pa.Table]]) -> ParsedChunk:
    return ParsedChunk({name: tables[0] if len(tables) == 1 else pa.concat_tables(tables)
                        for name, tables in parts.items() if tables})
