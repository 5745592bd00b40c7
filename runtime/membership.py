"""Which layer each target thread really sits in, and whether that is the layer its group names.

Problem: scx_layered 1.1.4 matches a task to a layer when the scheduler
attaches, at fork (with the parent's comm), and again only when the task next
becomes runnable after a rename (`tp_btf/task_rename` sets a flag that
`layered_runnable` acts on). A thread created after the attach that names
itself and never blocks stays in the layer it got at fork: measured in the lab
(LAB.md), the profile then makes things worse. A profile whose threads are
not where it puts them must not be trusted, and per-layer task counts cannot
show it.

Approach: where a thread is, is read from scx_layered's own task state:
`read_placement` runs threadwise-layer-of (observe/tracers/layerof.c, built
with the tracer), which looks each thread up in the scheduler's task-local
storage (`task_ctxs`, keyed by a pidfd) and prints its `layer_id`. The debug
match map (`layer_match_dbg`, `--enable-match-debug`, dumped by
`read_match_map`) is the fallback where the reader is not built: it loses
entries when many threads match at once (a thread placed but absent from it;
docs/lab.md "Membership: entries lost in a burst"). The expected layer of a
thread is the first layer of the applied config (a typed `LayerConfig`, as
everywhere after compile) whose match blocks accept its comm and its
process's comm (the same first-match rule scx_layered uses, through
synthesize's neutral layer view); layers whose blocks use matchers a
name cannot decide (AvgRuntime, cgroups, ...) make the expectation unknown
rather than wrong. A hinted layer (`HintEquals(N)`, a title group) takes a
thread whose process the runtime hints N (hints.py: the hint its title earns),
and no other, in the same first-match order. `rematch` has scx_layered match every thread of a process
again, one at a time, as each next becomes runnable (a re-attach to its own
cgroup sets the refresh flag; a nice change re-queues a runnable thread), which
is when scx_layered re-reads a renamed thread's name.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from threadwise.errors import MembershipUnavailable, MissingTool
from threadwise.observe.tracer_build import layer_of_path
from threadwise.paths import find_program

if TYPE_CHECKING:   # synthesize (pydantic) loads inside expected_layer: `threadwise status` stays fast
    from threadwise.synthesize.api import LayerConfig

MATCH_MAP = "layer_match_dbg"
PROC = Path("/proc")


@dataclass(frozen=True)
class ThreadLayer:
    """One target thread: where its group puts it, and where scx_layered has it."""

    tid: int
    pid: int
    comm: str
    process: str
    expected: str | None  # None: no name-decidable layer (AvgRuntime, cgroup matchers)
    actual: str | None  # None: not placed in a layer yet (never matched since the attach)
    # False: it has not run since the re-match set its refresh flag (its schedstat count of times
    # on a CPU unchanged), so it is placed nowhere yet, which is no fault; None: not known
    ran: bool | None = None

    @property
    def ok(self) -> bool:
        placed_nowhere_yet = self.actual is None and self.ran is False
        return self.expected is None or self.expected == self.actual or placed_nowhere_yet

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _bpftool() -> str:
    path = find_program("bpftool")
    if path is None:
        raise MissingTool("bpftool not found (needed to read scx_layered's tid -> layer map)",
                          hint="apt-get install bpftool")
    return path


def _as_int(raw: object) -> int:
    """bpftool prints a key/value either BTF-formatted (an int) or as little-endian hex bytes."""
    if isinstance(raw, int):
        return raw
    if isinstance(raw, list):
        return int.from_bytes(bytes(int(b, 16) for b in raw), "little")
    raise ValueError(f"unexpected bpftool value {raw!r}")


def parse_map_dump(text: str) -> dict[int, int]:
    """bpftool -j map dump output -> {tid: layer index}."""
    entries = json.loads(text or "[]")
    result: dict[int, int] = {}
    for entry in entries:
        formatted = entry.get("formatted", entry)
        result[_as_int(formatted["key"])] = _as_int(formatted["value"])
    return result


def read_match_map() -> dict[int, int]:
    """{tid: layer index} from the running scx_layered (started with --enable-match-debug)."""
    done = subprocess.run([_bpftool(), "-j", "map", "dump", "name", MATCH_MAP],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise MembershipUnavailable(
            f"cannot read scx_layered's {MATCH_MAP} map: {done.stderr.strip() or done.stdout.strip()}",
            hint="the runtime starts scx_layered with --enable-match-debug; is a profile applied?",
        )
    return parse_map_dump(done.stdout)


@dataclass(frozen=True)
class TaskLayers:
    """What threadwise-layer-of reported, one view per kind of line.

    layer: tid -> layer_id for each thread with a task context ("TID LAYER REFRESH"); an index
    past the config's layers (MAX_LAYERS before the first match) is no layer (`classify`), and a
    thread with a re-match pending is where it last ran. pending: those whose REFRESH is 1 (not
    runnable since their flag was set by a rename or an exec, so placed for their old name).
    gone: threads that ended before the read ("TID - gone"; a load command that is the workload
    ends with its window), of which nothing can be said. unknown: live threads the reader found
    no context for ("TID - nocontext") or could not read ("TID - ERRNO"), with the reason."""

    layer: dict[int, int]
    pending: frozenset[int]
    gone: frozenset[int]
    unknown: dict[int, str]

    @property
    def empty(self) -> bool:
        """No thread reported at all (the reader did not run, or found no map)."""
        return not (self.layer or self.gone or self.unknown)


def parse_task_layers(text: str) -> TaskLayers:
    """threadwise-layer-of's output -> TaskLayers. Lines it does not print are ignored; a bare
    "TID -" (the reader before it gave reasons) counts as unknown."""
    layer: dict[int, int] = {}
    pending: set[int] = set()
    gone: set[int] = set()
    unknown: dict[int, str] = {}
    for fields in (line.split() for line in text.splitlines()):
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        tid = int(fields[0])
        if fields[1] == "-":
            reason = fields[2] if len(fields) > 2 else "unknown"
            if reason == "gone":
                gone.add(tid)
            else:
                unknown[tid] = reason
        elif len(fields) == 3 and fields[1].isdigit():
            layer[tid] = int(fields[1])
            if fields[2] == "1":
                pending.add(tid)
    return TaskLayers(layer, frozenset(pending), frozenset(gone), unknown)


def read_placement(tids: list[int]) -> dict[int, int]:
    """{tid: layer index} of `tids` from scx_layered's task state (threadwise-layer-of), or from
    its debug match map when the reader is not built (set-up builds it with the tracer:
    `python -m threadwise.observe.tracer_build`)."""
    reader = layer_of_path()
    if not reader.is_file():
        return read_match_map()
    done = subprocess.run([str(reader), *(str(t) for t in tids)], capture_output=True, text=True,
                          check=False) if tids else None
    if done is not None and done.returncode != 0:
        raise MembershipUnavailable(
            f"cannot read scx_layered's task state: {done.stderr.strip() or done.stdout.strip()}",
            hint="is a profile applied (threadwise status)?")
    return parse_task_layers(done.stdout).layer if done is not None else {}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def process_threads(pid: int) -> list[tuple[int, str]]:
    """(tid, comm) of every live thread of `pid`."""
    threads = []
    try:
        tids = sorted(int(t) for t in os.listdir(PROC / str(pid) / "task"))
    except OSError:
        return []
    for tid in tids:
        comm = _read(PROC / str(pid) / "task" / str(tid) / "comm")
        if comm is not None:
            threads.append((tid, comm))
    return threads


def pids_with_comm_prefix(prefixes: list[str]) -> list[int]:
    """Processes whose comm starts with one of `prefixes` (scx_layered's PcommPrefix)."""
    pids = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            comm = _read(entry / "comm")
            if comm is not None and any(comm.startswith(p) for p in prefixes):
                pids.append(int(entry.name))
    return sorted(pids)


def target_prefixes(config: LayerConfig) -> list[str]:
    """The process comm prefixes the config's layers name (its workload)."""
    prefixes = {match.value for spec in config for block in spec.matches for match in block
                if match.kind == "PcommPrefix"}
    return sorted(prefixes)


def expected_layer(config: LayerConfig, comm: str, process: str, hint: int | None = None) -> str | None:
    """The first layer that takes (comm, process) with task hint `hint` (None: no hint), or None
    when a name cannot decide it."""
    # deferred: both load pydantic (~80 ms), which this module's other callers do without
    from threadwise.shape import synthetic
    from threadwise.synthesize.api import views_from_config

    # The shape only sizes Confined layers; matching does not depend on it.
    for view, spec in zip(views_from_config(config, synthetic(1)), config, strict=True):
        for block, matches in zip(view.blocks, spec.matches, strict=True):
            if block.hinted:
                if hint is not None and any(m.kind == "HintEquals" and m.value == hint for m in matches):
                    return view.name
            elif block.matches(comm, process):
                return None if block.other else view.name
    return None


def classify(config: LayerConfig, threads: list[tuple[int, int, str, str]],
             layer_of: dict[int, int], ran: dict[int, bool] | None = None,
             hints: dict[int, int] | None = None) -> list[ThreadLayer]:
    """(pid, tid, comm, process comm) threads against the map: expected and actual layer of each;
    `ran`: tid -> whether it has run since the re-match (unknown for a tid it lacks); `hints`:
    pid -> the hint its title earns (title groups, hints.py)."""
    names = config.layer_names()
    rows = []
    for pid, tid, comm, process in threads:
        index = layer_of.get(tid)
        actual = names[index] if index is not None and 0 <= index < len(names) else None
        expected = expected_layer(config, comm, process, (hints or {}).get(pid))
        rows.append(ThreadLayer(tid, pid, comm, process, expected, actual, (ran or {}).get(tid)))
    return rows


def run_count(pid: int, tid: int) -> int | None:
    """How many times the thread has been on a CPU (schedstat's third field), None if gone."""
    text = _read(PROC / str(pid) / "task" / str(tid) / "schedstat")
    fields = text.split() if text else []
    return int(fields[2]) if len(fields) >= 3 else None


def run_counts(pids: list[int]) -> dict[int, int]:
    """tid -> run count of every thread of `pids`."""
    counts = {}
    for pid in pids:
        for tid, _ in process_threads(pid):
            count = run_count(pid, tid)
            if count is not None:
                counts[tid] = count
    return counts


def membership(config: LayerConfig, *, pids: list[int] | None = None,
               match_map: dict[int, int] | None = None,
               since: dict[int, int] | None = None,
               hints: dict[int, int] | None = None, process: str | None = None) -> list[ThreadLayer]:
    """Every thread of the target processes with its expected and actual layer; `since` (the run
    counts taken at the re-match) tells a thread that has not run since from one that has;
    `hints`: pid -> its hint, for a config with hinted layers; `process`: the workload's comm
    prefix where no layer names it (a profile of title groups only)."""
    if pids is None:
        pids = pids_with_comm_prefix(target_prefixes(config) + ([process] if process else []))
    threads = [(pid, tid, comm, _read(PROC / str(pid) / "comm") or "?")
               for pid in pids for tid, comm in process_threads(pid)]
    # run counts before placements: a thread counted as run was matched before the placement is
    # read (scx_layered matches as a thread becomes runnable), so waking between the two reads
    # cannot make it "run, yet placed nowhere" (measured in the lab: docs/lab.md "Membership")
    ran = None
    if since is not None:
        now = {tid: run_count(pid, tid) for pid, tid, _, _ in threads}
        ran = {tid: count != since[tid] for tid, count in now.items() if tid in since and count is not None}
    if match_map is None:
        match_map = read_placement([tid for _, tid, _, _ in threads])
    # a thread that ended before its placement was read: nothing to say of it (TaskLayers.gone)
    threads = [t for t in threads if (PROC / str(t[0]) / "task" / str(t[1])).exists()]
    return classify(config, threads, match_map, ran, hints)


def cgroup2_root(mounts: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on a hybrid host)."""
    text = mounts if mounts is not None else (_read(PROC / "self" / "mounts") or "")
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def thread_state(pid: int, tid: int) -> str:
    """A thread's state letter (R running or runnable, S asleep, D in I/O...); "" when gone."""
    stat = _read(PROC / str(pid) / "task" / str(tid) / "stat")
    return stat.rpartition(") ")[2][:1] if stat else ""


def nudge(tid: int) -> None:
    """Re-queue a runnable thread (a nice change dequeues and enqueues it, which passes
    scx_layered's runnable callback), then put its nice value back."""
    nice = os.getpriority(os.PRIO_PROCESS, tid)
    os.setpriority(os.PRIO_PROCESS, tid, 18 if nice == 19 else nice + 1)
    os.setpriority(os.PRIO_PROCESS, tid, nice)


def rematch(pid: int, *, pace_s: float = 0.02) -> dict[int, int]:
    """Have scx_layered match every thread of `pid` again as it next becomes runnable, one at a time.

    Why not stop and continue the process: scx_layered's match map allocates each new entry from
    a small per-CPU pool, and the burst of matches a SIGCONT causes loses entries silently, for
    good (measured in the lab: 24 of 100 sleeping threads; docs/lab.md "Membership: entries lost
    in a burst"). Re-attaching the process to the cgroup it is in sets every thread's refresh
    flag (scx_layered's tp_btf/cgroup_attach_task) and moves nothing; sleeping threads re-match
    at their next wake-up, and runnable ones (a spinner renamed after its match) when `nudge`
    re-queues them, paced. Returns the threads' run counts taken right after the flags were set
    (`membership(since=...)`). Raises ProcessLookupError when `pid` is gone; a host without
    cgroup v2 or that refuses the write gets the nudges alone."""
    lines = _read(PROC / str(pid) / "cgroup")
    if lines is None:
        raise ProcessLookupError(pid)
    root = cgroup2_root()
    path = next((line[3:] for line in lines.splitlines() if line.startswith("0::")), None)
    if root is not None and path is not None:
        with contextlib.suppress(OSError):
            (root / path.lstrip("/") / "cgroup.procs").write_text(f"{pid}\n")
    counts = run_counts([pid])
    for tid, _ in process_threads(pid):
        if thread_state(pid, tid) == "R":
            with contextlib.suppress(OSError):  # the thread ended meanwhile
                nudge(tid)
        time.sleep(pace_s)
    return counts


def summarize(rows: list[ThreadLayer]) -> str:
    """One line per mismatched thread, or a one-line all-clear."""
    bad = [row for row in rows if not row.ok]
    if not rows:
        return "membership: no target threads found"
    if not bad:
        return f"membership: all {len(rows)} target threads in their layers"
    lines = [f"membership: {len(bad)} of {len(rows)} target threads are NOT in their group's layer:"]
    lines += [f"  {row.comm} (tid {row.tid}): expected {row.expected}, in {row.actual or 'no layer yet'}"
              for row in bad]
    return "\n".join(lines)
