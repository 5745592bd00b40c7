"""Who blocked whom: what held the CPU while a profile's latency groups waited, from a traced cell.

Problem: a ladder says that a profile's worker p99 got worse, not why. The why is on the CPU:
while a latency group's thread was runnable and waiting (from its wakeup, or from being
preempted, to the switch that ran it), something else held the CPU it then ran on: the hot
thread, a spinner, another group, scx_layered itself, or nothing (an idle CPU: wake-up latency).
Only a scheduler trace shows that, and tracing a measured cell would disturb it: identical
arms must stay identical (the membership probe once cost one arm ~10% at bg >= 1, docs/lab.md).

Approach: the trace is taken in an EXTRA cell that is never measured. `trace_cells` plans one
per profile arm that has latency groups, at the end of that arm's first turn (still attached),
at the ladder's top level, where the latency groups wait most (`THREADWISE_LAB_TRACE=all`: one
per level; `off`: none). The agent (`trace_cell`) runs it exactly like a cell, with observe's
libbpf tracer (`threadwise-sched`, packed into the initramfs with its libraries) live over the
window; its record files come back in `cells/IDX/trace/` with the tracer's control lines and a
/proc listing of thread names. On the host, `build_capture` turns them into a capture through
observe's interface `CaptureBuilder.tracer_records` (observe's own record reader, ingest and
finalize: no second parser), so sched_slice and thread_wait mean what they mean everywhere.
Each thread is mapped to its group with the profile's own matchers (runtime.membership's
`expected_layer`: scx_layered's first-match rule over the compiled config; the catch-all is no
group), and sql/blockers.sql sums, per waiting latency group, blocker thread name and CPU, the
overlap of the blocker's slices with the group's waits on the CPU each wait ended on. Every row
goes to the ladder file's `blocker` table (idx = the trace cell's number, after the measured
cells'; a trace cell is not a `cell` row, so no statistic can read it), and REPORT.md shows the
top three per group and traced cell (`report_section`). The trace cell's own metrics against the
measured cell before it (same arm, level and repeat) are the tracer's cost (`Traced.note`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from threadwise.errors import MissingTool, ThreadwiseError, TracerError, UsageError
from threadwise.observe.builder import CaptureBuilder
from threadwise.observe.store import open_capture
from threadwise.observe.tracer_build import build as build_tracer
from threadwise.refine.measure import store
from threadwise.refine.measure.plan import Cell, Plan
from threadwise.refine.measure.validity import stat_cpu_s
from threadwise.runtime.membership import expected_layer
from threadwise.sqlfiles import statement

if TYPE_CHECKING:
    from threadwise.synthesize.api import LayerConfig

TRACE_ENV = "THREADWISE_LAB_TRACE"
POLICIES = ("top", "all", "off")  # one trace cell per traced arm at the top level; per level; none
TRACE_RING_KB = 2048  # per CPU ring; rolesim under TCG writes well under 1 MB per 100-ms poll
TRACE_START_TIMEOUT_S = 60  # the tracer loads and verifies its programs under TCG first
TRACE_SEND_TIMEOUT_S = 300  # the agent waits this long for init to send a trace cell's payload
TOP_REPORTED = 3


def sql(name: str) -> str:
    """A named statement of `sql/blockers.sql`."""
    return statement("threadwise.refine", "sql/blockers.sql", name)


# --- what is traced, when ------------------------------------------------------------------------


def latency_groups(profile_toml: str | None) -> list[str]:
    """The profile's groups whose treatment is `latency`, in profile order."""
    if not profile_toml:
        return []
    # deferred: loads pydantic, which this module's other callers do without
    from threadwise.synthesize.api import parse_profile

    profile, _ = parse_profile(profile_toml)
    return [group.name for group in profile.groups if group.treatment.value == "latency"]


def policy() -> str:
    """THREADWISE_LAB_TRACE: `top` (default), `all` or `off`."""
    value = os.environ.get(TRACE_ENV, "").strip() or "top"
    if value not in POLICIES:
        raise UsageError(f"{TRACE_ENV}={value!r}", hint=f"one of {', '.join(POLICIES)}")
    return value


def default_tracer(attach_mode: str) -> Path | None:
    """The libbpf tracer for a plan the agent attaches itself (the initramfs guest), if it is
    built or can be (observe's build, in-process, cached by source hash); None where it cannot
    be built here: the trace is extra evidence, never a reason to stop a ladder."""
    if attach_mode != "direct" or policy() == "off":
        return None
    try:
        found = build_tracer(progress=lambda _line: None)
    except (MissingTool, TracerError):
        return None
    return found if found.is_file() else None


def trace_cells(plan: Plan) -> dict[int, tuple[Cell, ...]]:
    """turn index -> the trace cells run at the end of that turn (numbered after every measured
    cell): the first turn of each profile arm with latency groups, at the lowest and the top
    level (or every level under THREADWISE_LAB_TRACE=all). Both ends: a latency group failed
    at bg=0 in the first retrained rolesim record while the top level's rows (spinners) sent the
    guided search to the catch-all."""
    levels = sorted(plan.levels) if policy() == "all" else sorted({min(plan.levels), max(plan.levels)})
    found: dict[int, tuple[Cell, ...]] = {}
    idx = len(plan.cells)
    traced: set[str] = set()
    for turn, (name, cells) in enumerate(plan.turns):
        arm = plan.arm(name)
        if name in traced or arm.is_baseline or not latency_groups(arm.profile_toml):
            continue
        traced.add(name)
        found[turn] = tuple(Cell(idx + i, name, level, cells[0].repeat) for i, level in enumerate(levels))
        idx += len(levels)
    return found


# --- a trace cell's raw files -> a capture ---------------------------------------------------------


@dataclass(frozen=True)
class TraceCell:
    """A trace cell that came back: its number, arm, level, repeat and directory."""

    idx: int
    arm: str
    level: int
    repeat: int
    directory: Path


def returned(out: Path, plan: Plan) -> list[TraceCell]:
    """The trace cells in the run directory (numbered after the measured cells, with `trace/`)."""
    found = []
    for directory in (out / "cells").glob("*/trace"):
        cell = directory.parent / "cell"
        words = cell.read_text().split() if cell.is_file() else []
        if len(words) == 4 and words[0].isdigit() and int(words[0]) >= len(plan.cells):
            found.append(TraceCell(int(words[0]), words[1], int(words[2]), int(words[3]), directory.parent))
    return sorted(found, key=lambda t: t.idx)


@dataclass(frozen=True)
class Control:
    """What the tracer said on stdout: when it went live and stopped, and its kernel counts."""

    live_ts: int | None
    end_ts: int | None
    counts: dict[str, Any]

    @property
    def dropped(self) -> int:
        """Records the rings had no room for plus events a program never saw (recursion guard)."""
        kinds = (v for v in self.counts.values() if isinstance(v, dict) and "dropped" in v)
        return sum(int(v["dropped"]) for v in kinds) + sum(
            int(n) for n in self.counts.get("missed", {}).values())


def read_control(path: Path) -> Control:
    live = end = None
    counts: dict[str, Any] = {}
    text = path.read_text(errors="replace") if path.is_file() else ""
    for line in text.splitlines():
        if line.startswith("live "):
            live = int(line.split()[1])
        elif line.startswith("end "):
            end = int(line.split()[1])
        elif line.startswith("counts "):
            counts = json.loads(line[len("counts "):])
    return Control(live, end, counts)


def guest_threads(path: Path) -> list[tuple[int, int, str]]:
    """(tid, tgid, comm) from `grep -H '' /proc/*/task/*/comm` lines, written when tracing stopped."""
    rows = []
    text = path.read_text(errors="replace") if path.is_file() else ""
    for line in text.splitlines():
        where, _, comm = line.partition(":")
        parts = where.split("/")  # '', 'proc', TGID, 'task', TID, 'comm'
        if len(parts) == 6 and parts[2].isdigit() and parts[4].isdigit():
            rows.append((int(parts[4]), int(parts[2]), comm))
    return rows


def build_capture(trace: Path, dest: Path, *, kernel: str | None = None) -> Path:
    """A finalized capture of one trace directory: observe's CaptureBuilder reads the records with
    observe's own reader and ingest, and finalizes the capture like any other."""
    control = read_control(trace / "control")
    if control.live_ts is None or control.end_ts is None:
        raise ValueError(f"{trace}: the tracer never went live or never confirmed its stop "
                         f"({_tail(trace / 'stderr')})")
    cpus = len(control.counts.get("switch", {}).get("dropped_per_cpu", [])) or 1
    capture = CaptureBuilder(start_ts=control.live_ts, duration_ns=control.end_ts - control.live_ts,
                             nr_cpus=cpus, events_lost=control.dropped, host="lab guest",
                             kernel_release=kernel or "unknown")
    capture.tracer_records(trace)
    # names as /proc had them when tracing stopped: a thread that never left its CPU in the
    # window has no record of its own (the tracer names a task at its first switch-out)
    capture.events("raw_task_seen", [(control.end_ts, tid, tgid, comm)
                                     for tid, tgid, comm in guest_threads(trace / "threads")])
    return capture.write(dest)


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip() if path.is_file() else ""
    return text[-300:] or "no message"


# --- blockers of a capture -------------------------------------------------------------------------


@dataclass(frozen=True)
class Blocker:
    """One `blocker` row before it is stored: `blocker` ran on `cpu` for `wait_ns` of the waits of
    `waiter_group`'s threads that ended there, overlapping `waits` of them."""

    waiter_group: str
    blocker: str
    blocker_group: str | None
    cpu: int
    wait_ns: int
    waits: int


def thread_groups(con: duckdb.DuckDBPyConnection, config: LayerConfig,
                  groups: set[str]) -> pa.Table:
    """(utid, grp) of every thread of a capture: its layer by the config's first match, when that
    layer is one of the profile's `groups` (else NULL: the catch-all, or no group)."""
    layer: dict[tuple[str, str | None], str | None] = {}
    utids, names = [], []
    for utid, name, process in con.execute(sql("capture_threads")).fetchall():
        if name is None:
            continue
        key = (name, process)
        if key not in layer:
            found = expected_layer(config, name, process)
            layer[key] = found if found in groups else None
        utids.append(utid)
        names.append(layer[key])
    return pa.table({"utid": pa.array(utids, pa.int64()), "grp": pa.array(names, pa.string())})


def capture_blockers(capture: Path, config: LayerConfig, profile_toml: str) -> list[Blocker]:
    """Who held the CPU while each latency group of the profile waited, in one capture."""
    # deferred: loads pydantic, which this module's other callers do without
    from threadwise.synthesize.api import parse_profile

    waiting = latency_groups(profile_toml)
    if not waiting:
        return []
    profile, _ = parse_profile(profile_toml)
    with open_capture(capture) as con:
        con.register("_thread_group", thread_groups(con, config, {g.name for g in profile.groups}))
        try:
            rows = con.execute(sql("blockers"), [waiting]).fetchall()
        finally:
            con.unregister("_thread_group")
    return [Blocker(group, name, bgroup, int(cpu), int(ns), int(n))
            for group, name, bgroup, cpu, ns, n in rows]


# --- a run's trace cells -> the ladder file --------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """What tracing cost in one trace cell, as measured there."""

    traced_s: float  # the tracer live -> stop
    events: int
    dropped: int
    tracer_cpu_s: float | None  # the tracer process (user side: draining rings, writing files)
    bpf_s: float | None  # the kernel's run time of the tracer's BPF programs (bpf_stats_enabled)
    bpf_runs: int
    ratios: dict[str, float]  # metric -> traced / the measured cell of the same arm, level, repeat
    denied: tuple[float | None, float | None]  # host's denied vCPU share: traced, measured cell

    def describe(self) -> str:
        def share(value: float | None) -> str:
            return "?" if value is None else f"{value:.2f}"

        cpu = "?" if self.tracer_cpu_s is None else f"{self.tracer_cpu_s:.2f} s"
        bpf = "?" if self.bpf_s is None else (
            f"{self.bpf_s:.3f} s in {self.bpf_runs:,} runs"
            + (f" ({self.bpf_s / self.bpf_runs * 1e6:.1f} us each)" if self.bpf_runs else ""))
        ratios = ", ".join(f"{metric} {ratio:.3g}x" for metric, ratio in sorted(self.ratios.items()))
        return (f"{self.events:,} events in {self.traced_s:.1f} s, {self.dropped} dropped; tracer process "
                f"{cpu} CPU, its BPF programs {bpf}; against the untraced cell: {ratios or 'no metrics'} "
                f"(host denied {share(self.denied[0])} traced, {share(self.denied[1])} untraced)")


def _tracer_cpu_s(trace: Path) -> float | None:
    try:
        before, after = ((trace / f"tracer.stat.{w}").read_text() for w in ("live", "stop"))
        clk = int((trace.parent / "clk_tck").read_text().strip() or 100)
        return stat_cpu_s(before, after, clk)
    except (OSError, ValueError, IndexError):
        return None


def bpf_run_time(trace: Path, control: Control) -> tuple[float | None, int]:
    """(seconds, runs) of the tracer's BPF programs in `bpftool -j prog show` at stop; the
    programs are the ones the tracer's counts name (its `missed` keys)."""
    names = set(control.counts.get("missed", {}))
    try:
        progs = json.loads((trace / "progs.json").read_text())
    except (OSError, ValueError):
        return None, 0
    mine = [p for p in progs if isinstance(p, dict) and p.get("name") in names and "run_time_ns" in p]
    if not mine:
        return None, 0
    return sum(int(p["run_time_ns"]) for p in mine) / 1e9, sum(int(p.get("run_cnt", 0)) for p in mine)


def tracing_cost(cell: TraceCell, reference: Path | None, *, metrics: Callable[[Path], dict[str, float]],
                 denied: Callable[[Path], float | None]) -> Cost:
    """The trace cell's cost: the tracer's own CPU, and its metrics against the measured cell
    `reference` (same arm, level and repeat, run seconds before it)."""
    trace = cell.directory / "trace"
    control = read_control(trace / "control")
    written = control.counts.get("written", {})
    traced = metrics(cell.directory) if (cell.directory / "done").is_file() else {}
    untraced = metrics(reference) if reference is not None else {}
    bpf_s, runs = bpf_run_time(trace, control)
    span = ((control.end_ts or 0) - (control.live_ts or 0)) / 1e9
    return Cost(max(span, 0.0), sum(int(n) for n in written.values()), control.dropped, _tracer_cpu_s(trace),
                bpf_s, runs, {m: v / untraced[m] for m, v in traced.items() if untraced.get(m)},
                (denied(cell.directory), denied(reference) if reference is not None else None))


def ingest_traces(con: duckdb.DuckDBPyConnection, run_id: int, plan: Plan, out: Path, *,
                  kernel: str | None, metrics: Callable[[Path], dict[str, float]],
                  denied: Callable[[Path], float | None]) -> list[str]:
    """Store the blockers of every trace cell of `out` as `blocker` rows; one note per trace cell.

    `metrics` and `denied` read a cell directory's metrics and the host's denied vCPU share, so
    each note says what tracing cost against the measured cell of the same arm, level and repeat.
    A trace that cannot be read is a note, never a failed ingest: the measurements stand without it."""
    notes = []
    for cell in returned(out, plan):
        arm = plan.arm(cell.arm)
        if arm.config is None or arm.profile_toml is None:
            continue
        where = f"trace cell {cell.idx} ({cell.arm}, bg={cell.level})"
        try:
            capture = build_capture(cell.directory / "trace", cell.directory / "trace.duckdb", kernel=kernel)
            rows = capture_blockers(capture, arm.config, arm.profile_toml)
        except (ThreadwiseError, duckdb.Error, OSError, ValueError) as error:
            notes.append(f"{where}: not read: {getattr(error, 'message', error)}")
            continue
        store.insert(con, "blocker", [{
            "run_id": run_id, "idx": cell.idx, "arm": cell.arm, "level": cell.level,
            "waiter_group": r.waiter_group, "blocker": r.blocker, "blocker_group": r.blocker_group,
            "cpu": r.cpu, "wait_s": r.wait_ns / 1e9, "waits": r.waits} for r in rows])
        key = (cell.arm, cell.level, cell.repeat)
        twin = next((c for c in plan.cells if (c.arm, c.level, c.repeat) == key), None)
        reference = out / "cells" / str(twin.idx) if twin is not None else None
        cost = tracing_cost(cell, reference, metrics=metrics, denied=denied)
        notes.append(f"{where}: {len(rows)} blocker rows; {cost.describe()}")
    return notes


# --- REPORT.md --------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def blocker_line(waiter: str, blocker: str, *, group: str | None, cpu: int, wait_s: float, waits: int,
                 total_s: float) -> str:
    """E.g. `worker waited 22 ms behind hot-0 [hot] on CPU 1 (140 waits; 54% of its 41 ms)`."""
    share = f"{wait_s / total_s:.0%} of its {_ms(total_s)}" if total_s > 0 else "its whole wait"
    if blocker == "swapper":
        return (f"{waiter} waited {_ms(wait_s)} on CPU {cpu} while it was idle (wake-up latency; "
                f"{waits} waits; {share})")
    where = f" [{group}]" if group else ""
    return f"{waiter} waited {_ms(wait_s)} behind {blocker}{where} on CPU {cpu} ({waits} waits; {share})"


def report_section(con: duckdb.DuckDBPyConnection, top: int = TOP_REPORTED) -> list[str]:
    """REPORT.md's "Who blocked whom" lines from the `blocker` table ([] when nothing was traced)."""
    rows = con.execute(sql("report_rows"), [top]).fetchall()
    if not rows:
        return []
    lines = ["## Who blocked whom", "",
             "One extra, unmeasured cell per profile arm with latency groups (at the end of its first "
             "turn, still attached) ran with the libbpf tracer live. While the threads of each latency "
             "group were runnable and waiting (from their wakeup or preemption until they ran), this "
             f"is what held the CPU they then ran on; the top {top} per group (docs/refine.md, "
             "\"Who blocked whom\"). `[group]`: the blocker's group in that profile; none: the "
             "catch-all.", ""]
    for (run_id, idx, arm, level), cell_rows in groupby(rows, key=lambda r: r[:4]):
        lines.append(f"- run {run_id}, arm `{arm}` at bg={level} (trace cell {idx}):")
        for *_, waiter, name, group, cpu, wait_s, waits, total in cell_rows:
            line = blocker_line(waiter, name, group=group, cpu=cpu, wait_s=wait_s, waits=waits, total_s=total)
            lines.append(f"  - {line}")
    return [*lines, ""]
