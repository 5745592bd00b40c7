"""The bpftrace backend: runs tracers/sched_stream.bt and tails its output file.

bpftrace writes to a file (`-o`), not a pipe, and we read it every poll: a pipe
would wake our reader for every few events, and every wakeup is itself traced,
which feeds back into the stream. Per-CPU perf buffers are enlarged
(BPFTRACE_PERF_RB_PAGES) so bursts are absorbed; what still overflows is
reported by bpftrace as "Lost N events" and, independently, shows up as the
difference between the in-kernel @events counts and the rows we ingested.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import time
from importlib import resources
from pathlib import Path

from threadwise.errors import MissingTool, PermissionProblem
from threadwise.observe.backend import TracerReport, kill_tracer, stderr_tail, wait_for_attach
from threadwise.observe.stream import ParsedChunk, StreamParser
from threadwise.paths import find_program

SCRIPT = "sched_stream.bt"
TRACEFS = Path("/sys/kernel/tracing")
PR_SET_PDEATHSIG = 1
PERF_RB_PAGES = "1024"   # per CPU: 4 MiB of perf ring buffer
MAP_KEYS_MAX = "65536"   # @seen holds one key per thread seen
DRAIN_S = 0.3            # after the stop line: let bpftrace read the other CPUs' buffers
# While tracing, a poll parses the stream in slices of READ_CHARS (about 1,600 lines, ~15 ms on
# this host) until it has used POLL_BUDGET_S of wall time; the rest waits for the next poll or
# the drain after the stop. On a quiet host that keeps up with the stream as before; on a busy
# one the observer's loop gets back to its deadline: one unbounded read of the backlog took a
# 5-s capture to 23.6 s, 1-MiB reads to 17 s (a nice -20 load on this 2-core host).
READ_CHARS = 1 << 16
POLL_BUDGET_S = 0.25
STALL_S = 5.0            # no output for this long while draining: bpftrace is stuck
EVENTS_MAP = "AT_events"  # the script's @events, as bpftrace names the kernel map


def script_path() -> Path:
    return Path(str(resources.files("threadwise.observe").joinpath("tracers", SCRIPT)))


def _child_setup() -> None:
    # Die with the observer (kill -9 included) and ignore the terminal's Ctrl-C:
    # the observer decides when tracing stops. SIGKILL, not SIGTERM: bpftrace runs END
    # and prints its maps on SIGTERM, tracing on for nobody for up to a second; killed,
    # its BPF links (file descriptors) are released at once.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


MEMLOCK_WARNING = "RLIMIT_MEMLOCK"   # a warning bpftrace prints on every start; no error


class BpftraceBackend:
    name = "bpftrace"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: Path | None = None
        self._err: Path | None = None
        self._fh = None
        self._parser = StreamParser()

    # -- prerequisites -------------------------------------------------------
    def check(self) -> None:
        if shutil.which("bpftrace") is None:
            raise MissingTool("bpftrace is not installed",
                              hint="run scripts/setup-system.sh (apt-get install bpftrace)")
        if os.geteuid() != 0:
            raise PermissionProblem(
                "eBPF tracing needs root: bpftrace must load BPF programs and attach to "
                "tracepoints (CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)",
                hint="run as root, e.g. sudo .venv/bin/threadwise observe ...",
            )
        if not (TRACEFS / "events" / "sched" / "sched_switch").exists():
            raise MissingTool(
                f"tracefs is not mounted at {TRACEFS} (no sched tracepoints visible)",
                hint=f"mount -t tracefs nodev {TRACEFS}",
            )

    def version(self) -> str:
        out = subprocess.run(["bpftrace", "--version"], capture_output=True, text=True, check=False)
        match = re.search(r"v?(\d+\.\d+\.\d+)", out.stdout)
        return match.group(1) if match else out.stdout.strip()

    # -- lifecycle -------------------------------------------------------------
    def start(self, workdir: Path, *, attach_timeout_s: float = 60.0) -> int:
        self._out = workdir / "stream.txt"
        self._err = workdir / "bpftrace.err"
        self._out.touch()
        env = dict(os.environ, BPFTRACE_PERF_RB_PAGES=PERF_RB_PAGES,
                   BPFTRACE_MAP_KEYS_MAX=MAP_KEYS_MAX)
        with open(self._err, "wb") as err:
            self._proc = subprocess.Popen(
                ["bpftrace", "-o", str(self._out), str(script_path()), str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                preexec_fn=_child_setup,  # noqa: PLW1509 - prctl must run in the child
            )
        self._fh = open(self._out, encoding="utf-8", errors="replace")  # noqa: SIM115
        self._pending: list[ParsedChunk] = []

        def live() -> int | None:
            self._pending.append(self._read())
            if self._parser.live_ts is None:
                time.sleep(0.05)
            return self._parser.live_ts

        return wait_for_attach(self._proc, "bpftrace", self._err, attach_timeout_s, live,
                               skip=MEMLOCK_WARNING)

    def _read(self, limit: int = -1) -> ParsedChunk:
        return self._take(limit)[0]

    def _take(self, limit: int) -> tuple[ParsedChunk, bool]:
        """Parse up to `limit` characters of the stream (-1: all); True when it had that many."""
        assert self._fh is not None
        if self._fh.closed:   # stopped: stop() handed over everything
            return ParsedChunk({}), False
        text = self._fh.read(limit)
        return self._parser.feed(text), limit >= 0 and len(text) == limit

    def poll(self) -> ParsedChunk:
        """What arrived since the last poll, as far as POLL_BUDGET_S of parsing gets."""
        chunks, self._pending = self._pending, []
        budget_end = time.monotonic() + POLL_BUDGET_S
        more = True
        while more and time.monotonic() < budget_end:
            chunk, more = self._take(READ_CHARS)
            chunks.append(chunk)
        return _merge(chunks) if chunks else ParsedChunk({})

    def pending(self) -> int:
        return 0   # bpftrace's stream is parsed as it arrives

    def task_activity(self) -> None:
        return None   # births are in its parsed stream, not told apart: observe scans on a timer

    def drain_into(self, writer: object) -> int:
        return 0   # stop() returned everything

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> tuple[ParsedChunk, TracerReport]:
        assert self._proc is not None
        stop_requested_ts = time.monotonic_ns()
        map_counts: dict[str, int] | None = None
        chunks, self._pending = self._pending, []   # what start() read before the first poll
        if self._proc.poll() is None:
            # kill(pid, 0) is the script's stop trigger (see sched_stream.bt): the
            # kernel side stops counting and printing, then we drain the buffers
            # (until the E line and a little longer for the other CPUs' buffers)
            # before SIGINT makes bpftrace detach. The trigger goes first: parsing
            # the backlog before it ran the window 12 s past a 5-s capture's end on
            # a busy host.
            # bpftrace formats events in user space and can be seconds behind
            # the kernel under load: wait while it still makes progress.
            os.kill(self._proc.pid, 0)
            last_size, last_growth = -1, time.monotonic()
            while self._parser.end_ts is None and self.alive():
                time.sleep(0.05)
                chunks.append(self._read())
                size = self._out.stat().st_size if self._out else 0
                if size != last_size:
                    last_size, last_growth = size, time.monotonic()
                elif time.monotonic() - last_growth > STALL_S:
                    break
            time.sleep(DRAIN_S)
            chunks.append(self._read())
            # the kernel side stopped counting inside our kill(pid, 0) (sys_enter_kill runs in the
            # caller's context, before the call returns), so the map's counts are final whether or
            # not the E line has come through bpftrace's user space yet. Read them before SIGINT:
            # on a loaded host the E line could stall past STALL_S, and bpftrace's exit print of
            # the map come late or never (a make test beside a Spark job read 0 switches); what
            # the stream did not deliver then counts as lost, as it is.
            map_counts = read_event_counts(self._proc.pid) if self.alive() else None
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_tracer(self._proc)
        chunks.append(self._read())
        chunks.append(self._parser.close())
        if self._fh is not None:
            self._fh.close()
        report = TracerReport(
            end_ts=self._parser.end_ts,
            stop_requested_ts=stop_requested_ts,
            kernel_counts=map_counts or dict(self._parser.kernel_counts),
            unparsed=self._parser.unparsed,
            unparsed_samples=list(self._parser.unparsed_samples),
            stderr_tail=stderr_tail(self._err, skip=MEMLOCK_WARNING),
        )
        return _merge(chunks), report


def _bytes(raw: object) -> bytes:
    return bytes(int(b, 16) for b in raw) if isinstance(raw, list) else str(raw).encode()


def read_event_counts(pid: int) -> dict[str, int] | None:
    """The script's @events counts read straight from the kernel map of bpftrace `pid`.

    bpftrace prints its maps only while it exits, and on a loaded machine that print could come
    late or not at all (a CI run read 0 switches). The map itself is in the kernel: find it among
    the maps this process holds (/proc/PID/fdinfo map_id) and dump it with bpftool. None when
    it cannot be read; the printed counts are then the fallback.
    """
    bpftool = find_program("bpftool")
    ids: set[int] = set()
    try:
        for info in Path(f"/proc/{pid}/fdinfo").iterdir():
            with contextlib.suppress(OSError):
                if match := re.search(r"^map_id:\s*(\d+)", info.read_text(), re.M):
                    ids.add(int(match.group(1)))
    except OSError:
        return None
    if bpftool is None or not ids:
        return None
    shown = subprocess.run([bpftool, "-j", "map", "show"], capture_output=True, text=True, check=False)
    try:
        maps = json.loads(shown.stdout or "[]")
    except ValueError:
        return None
    found = [m["id"] for m in maps if m.get("id") in ids and m.get("name") == EVENTS_MAP]
    if not found:
        return None
    dumped = subprocess.run([bpftool, "-j", "map", "dump", "id", str(found[0])],
                            capture_output=True, text=True, check=False)
    try:
        entries = json.loads(dumped.stdout or "[]")
    except ValueError:
        return None
    counts: dict[str, int] = {}
    for entry in entries:
        key = _bytes(entry["key"]).split(b"\0", 1)[0].decode(errors="replace")
        total = sum(int.from_bytes(_bytes(v["value"]), "little") for v in entry.get("values", []))
        counts[key] = total
    return counts


def _merge(chunks: list[ParsedChunk]) -> ParsedChunk:
    import pyarrow as pa

    tables: dict[str, list[pa.Table]] = {}
    lost: list[int] = []
    for chunk in chunks:
        lost.extend(chunk.lost)
        for name, table in chunk.tables.items():
            tables.setdefault(name, []).append(table)
    return ParsedChunk({name: pa.concat_tables(parts) for name, parts in tables.items()}, lost)
