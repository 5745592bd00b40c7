"""From the agent's raw files to the ladder file: cells, samples, membership, validity, the run.

Problem: the guest agent leaves directories of raw text (command output, `times`
stamps, /proc stat snapshots, a bpftool map dump); the host must turn them into
typed rows without losing a cell, including the cells of a run that stopped
half-way.

Approach: every planned cell that left a directory becomes a `cell` row (valid
or not, with reasons); its metrics become `sample` rows either way, so a reader
can see what an invalid cell would have said (statistics read valid cells
only). Membership compares each
target thread's layer in scx_layered's map with the first layer of the arm's
config that its names select. A run whose agent did not finish records where
it stopped.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from threadwise.refine.measure import blockers, store
from threadwise.refine.measure.ladder import Plan, arm_hint_plan
from threadwise.refine.measure.metrics import parse_metrics, require
from threadwise.refine.measure.rows import ArmRow, CellRow, MembershipRow, RunRow, SampleRow
from threadwise.refine.measure.validity import CellRaw, read_cell, reasons
from threadwise.runtime.lab import hostload
from threadwise.runtime.lab.agent import Execution
from threadwise.runtime.membership import TaskLayers, classify, parse_map_dump, parse_task_layers

if TYPE_CHECKING:
    from threadwise.runtime.hints import HintPlan
    from threadwise.synthesize.api import LayerConfig


@dataclass(frozen=True)
class Ingested:
    run_id: int
    cells: int
    valid: int
    planned: int
    completed: bool
    stopped_reason: str | None
    notes: tuple[str, ...] = ()  # one per trace cell: its blockers and what tracing cost (blockers.py)


def _title_hints(directory: Path, hint_plan: HintPlan | None) -> dict[int, int] | None:
    """pid -> the hint its title earns (titles.txt, "PID TITLE" lines the probe wrote), for an
    arm with title groups; None for one without."""
    if hint_plan is None:
        return None
    path = directory / "titles.txt"
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    found = {}
    for line in lines:
        pid, _, title = line.partition(" ")
        hint = hint_plan.hint_for(title.strip() or None)
        if pid.isdigit() and hint is not None:
            found[int(pid)] = hint
    return found


def _membership(raw: CellRaw, directory: Path, config: LayerConfig, run_id: int,
                idx: int, *, hint_plan: HintPlan | None = None) -> list[MembershipRow]:
    """The cell's membership rows (tid, comm, expected, actual); sets raw.mismatched / membership_error.
    For an arm with title groups (`hint_plan`), a process's hint counts as scx_layered counts it."""
    threads_text = (directory / "threads.txt").read_text() if (directory / "threads.txt").is_file() else ""
    layers = directory / "layers.txt"
    task_layers = parse_task_layers(layers.read_text() if layers.is_file() else "")
    layer_of = _placement(raw, directory, task_layers)
    if layer_of is None:
        return []
    listed = [line.split(maxsplit=2) for line in threads_text.splitlines() if line.strip()]
    # ended before its placement was read and not in the map either: nothing to say of it
    gone = task_layers.gone - set(layer_of)
    threads = [t for t in listed if int(t[1]) not in gone]
    process_comm = {int(pid): comm for pid, tid, comm in threads if pid == tid}
    # idle.txt: the threads that have not run since the attach's re-match (agent.sh idle_since);
    # ThreadLayer.ok holds one of them absent from the map to be placed nowhere yet, no fault
    idle = _tids(directory / "idle.txt") if (directory / "idle.txt").is_file() else None
    ran = None if idle is None else {int(tid): int(tid) not in idle for _, tid, _ in threads}
    # a re-match pending on a thread asleep at the probe (an exec'd leader waiting in join) is
    # taken as it wakes: placed for its new name nowhere yet, no fault; a running one is judged
    states = _states(directory / "states.txt")
    for tid in task_layers.pending:
        if states.get(tid, "R") not in ("R", "") and ran is not None:
            layer_of.pop(tid, None)
            ran[tid] = False
    found = classify(config, [(int(pid), int(tid), comm, process_comm.get(int(pid), comm))
                             for pid, tid, comm in threads], layer_of, ran,
                     _title_hints(directory, hint_plan))
    rows = [MembershipRow(run_id=run_id, idx=idx, tid=t.tid, comm=t.comm, expected_layer=t.expected,
                          actual_layer=t.actual) for t in found]
    raw.mismatched += [f"{t.comm} (tid {t.tid}): expected {t.expected}, in {t.actual or 'none'}"
                       + _unread(task_layers, t.tid) for t in found if not t.ok]
    raw.members = len(rows)
    if not rows:
        raw.membership_error = ("no target threads found during the window" if not listed else
                                f"all {len(listed)} target threads ended before the probe read their "
                                f"layers{_probe_timing(directory)}")
    return rows


def _probe_timing(directory: Path) -> str:
    """ " (read 2.3 s into a 2.1-s window)" from probe.at and wall, or "" where either is missing."""
    try:
        read_at = float((directory / "probe.at").read_text().split()[2])
        start, end = (float(v) for v in (directory / "wall").read_text().split())
    except (OSError, ValueError, IndexError):
        return ""
    return f" (read {read_at - start:.1f} s into a {end - start:.1f}-s window)"


def _unread(task_layers: TaskLayers, tid: int) -> str:
    """Why threadwise-layer-of could not read a thread, for the mismatch line ("" if it could)."""
    reason = task_layers.unknown.get(tid)
    return "" if reason is None else f" (layer-of: {reason})"


def _placement(raw: CellRaw, directory: Path, task_layers: TaskLayers) -> dict[int, int] | None:
    """tid -> layer index at the probe: from scx_layered's task state (layers.txt, written by
    threadwise-layer-of) where it has the thread, else from its debug match map
    (membership.json), which loses entries in a burst of matches; None (and
    raw.membership_error) when neither was read. The map fills in per thread where the reader
    has none: for a thread that ended before the read ("TID - gone"), its entry (the map keeps
    entries of ended threads) is the layer it was last matched to (docs/lab.md "The mid-window
    probe came too late")."""
    layers = directory / "layers.txt"
    exact = task_layers.layer
    dump = directory / "membership.json"
    try:
        witness = parse_map_dump(dump.read_text()) if dump.is_file() else None
    except (ValueError, KeyError) as bad:
        witness = None
        raw.membership_error = f"unreadable tid->layer map ({bad})"
    if witness is None and task_layers.empty:
        err = directory / "layers.err" if layers.is_file() else directory / "membership.err"
        why = err.read_text().strip()[:200] if err.is_file() else "no map dump"
        raw.membership_error = raw.membership_error or f"no tid->layer map ({why or 'empty'})"
        return None
    raw.membership_error = None
    return {**(witness or {}), **exact}


def _states(path: Path) -> dict[int, str]:
    """tid -> its state letter at the probe (states.txt: "TID STATE")."""
    if not path.is_file():
        return {}
    pairs = (line.split() for line in path.read_text().splitlines())
    return {int(f[0]): f[1] for f in pairs if len(f) == 2 and f[0].isdigit()}


def _tids(path: Path) -> set[int]:
    """Thread ids, one a line."""
    return {int(word) for word in path.read_text().split() if word.isdigit()}


def _metrics(plan: Plan, out: Path, directory: Path) -> tuple[dict[str, float], str | None]:
    load = plan.workload.load
    try:
        if load.source == "command":
            text = (directory / "load.stdout").read_text(errors="replace")
        elif (directory / "service.window").is_file():
            # the window's lines, cut by the agent as the cell ended (agent.sh): a cell that has
            # just come back is read before service.log arrives (the early-stop question)
            text = (directory / "service.window").read_text(errors="replace")
        else:
            # a raw directory from before service.window: cut the window out of service.log
            first, last = (int(v) for v in (directory / "service.lines").read_text().split())
            lines = (out / "service.log").read_text(errors="replace").splitlines()
            # the warm-up is before the window; lines written during it are outside [first, last)
            text = "\n".join(lines[first:last])
        values = parse_metrics(load.parser, text, source=load.source)
        objective = plan.workload.objective
        wanted = [objective.primary.metric, *(s.metric for s in objective.secondary)]
        require(values, wanted, parser=load.parser)
        return values, None
    except (OSError, ValueError) as error:
        message = getattr(error, "message", str(error))
        return {}, message.splitlines()[0][:300]


def ingest(con: duckdb.DuckDBPyConnection, plan: Plan, out: Path, execution: Execution, *,
           command: str, purpose: str, scx_version: str) -> Ingested:
    """Store one executed plan as a run; returns its id and counts."""
    run_id = store.next_run_id(con)
    objective = plan.workload.objective
    configs = {arm.name: arm.config for arm in plan.arms if arm.config is not None}
    hint_plans = {arm.name: arm_hint_plan(arm) for arm in plan.arms}
    cell_rows: list[CellRow] = []
    sample_rows: list[SampleRow] = []
    member_rows: list[MembershipRow] = []
    host = hostload.read_series(out)
    for cell in plan.cells:
        directory = out / "cells" / str(cell.idx)
        if not (directory / "cell").is_file():
            continue
        raw = read_cell(directory, source=plan.workload.load.source)
        values, metrics_error = _metrics(plan, out, directory) if raw.done else ({}, None)
        if raw.done and cell.arm in configs:
            member_rows += _membership(raw, directory, configs[cell.arm], run_id, cell.idx,
                                       hint_plan=hint_plans[cell.arm])
        why = reasons(raw, baseline=plan.arm(cell.arm).is_baseline, vcpus=execution.vcpus,
                      window_s=objective.window_s, duty=plan.background_duty,
                      metrics_error=metrics_error, load_is_target=plan.workload.service is None)
        host_s = host.window(*raw.window) if host is not None and raw.window else None
        cell_rows.append(CellRow(
            run_id=run_id, idx=cell.idx, arm=cell.arm, level=cell.level,
            repeat=cell.repeat, valid=not why, reasons="; ".join(why), wall_s=raw.wall_s,
            spinner_cpu_s=raw.spinner_cpu_s, generator_cpu_s=raw.generator_cpu_s,
            scx_cpu_s=raw.scx_cpu_s, service_cpu_s=raw.service_cpu_s, busy_cpu_s=raw.busy_cpu_s,
            host_cpu_s=host_s[0] if host_s else None, host_wait_s=host_s[1] if host_s else None,
            state_before=raw.state_before, state_after=raw.state_after,
        ))
        sample_rows += [SampleRow(run_id=run_id, idx=cell.idx, metric=m, value=v)
                        for m, v in sorted(values.items())]
    finished = (out / "finished").is_file() and len(cell_rows) == len(plan.cells)
    stopped = None if finished else _where_stopped(out, plan, len(cell_rows), execution)
    store.insert(con, "run", [RunRow(
        run_id=run_id, started=datetime.now(UTC).replace(tzinfo=None), command=command,
        purpose=purpose, workload=plan.workload.name,
        workload_toml=plan.workload_toml,
        primary_metric=objective.primary.metric, primary_direction=objective.primary.direction,
        secondary=json.dumps([{"metric": s.metric, "direction": s.direction}
                              for s in objective.secondary]),
        levels=json.dumps(list(plan.levels)), repeats=plan.repeats, arm_order=plan.order,
        seed=plan.seed, window_s=objective.window_s, warmup_s=objective.warmup_s,
        host_kernel=platform.release(), guest_kernel=execution.guest_kernel,
        vcpus=execution.vcpus, tcg=execution.tcg, scx_version=scx_version, shape=plan.shape,
        completed=finished, stopped_reason=stopped, host_priority=execution.host_priority,
        wall_s=execution.wall_s or None,
    )])
    store.insert(con, "arm", [ArmRow(
        run_id=run_id, arm=arm.name, kind="baseline" if arm.is_baseline else "profile",
        profile_toml=arm.profile_toml,
        config_json=None if arm.config is None else arm.config.to_json(),   # the edge: stored as text
        attach_s=_attach_s(out, arm.name),
    ) for arm in plan.arms])
    store.insert(con, "cell", cell_rows)
    store.insert(con, "sample", sample_rows)
    store.insert(con, "membership", member_rows)
    # the extra, unmeasured trace cells: who blocked the latency groups (no cell or sample rows)
    def denied(directory: Path) -> float | None:
        raw = read_cell(directory, source=plan.workload.load.source)
        got = host.window(*raw.window) if host is not None and raw.window else None
        return got[1] / (got[0] + got[1]) if got and got[0] + got[1] > 0 else None

    notes = blockers.ingest_traces(con, run_id, plan, out, kernel=execution.guest_kernel,
                                   metrics=lambda directory: _metrics(plan, out, directory)[0],
                                   denied=denied)
    con.execute("CHECKPOINT")
    valid = sum(1 for row in cell_rows if row.valid)
    return Ingested(run_id, len(cell_rows), valid, len(plan.cells), finished, stopped, tuple(notes))


def _attach_s(out: Path, arm: str) -> float | None:
    path = out / "arms" / f"{arm}.attach_s"
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


EARLY_STOP = "stopped early by the host"  # how an early stop reads in run.stopped_reason


def _where_stopped(out: Path, plan: Plan, cells_seen: int, execution: Execution) -> str:
    if execution.stopped_by_host:
        return f"{EARLY_STOP} after {cells_seen} of {len(plan.cells)} cells: {execution.stopped_by_host}"
    failed = out / "failed"
    why = failed.read_text().strip() if failed.is_file() else f"agent exit status {execution.status}"
    last = ""
    log = out / "agent.log"
    if log.is_file():
        lines = log.read_text(errors="replace").strip().splitlines()
        last = f"; last agent line: {lines[-1]}" if lines else ""
    return f"stopped after {cells_seen} of {len(plan.cells)} cells ({why}){last}{_service_said(out, why)}"


def _service_said(out: Path, why: str) -> str:
    """The end of the service's stderr when it died or never got ready (e.g. `not found`: the
    real cause, which the agent's own line does not name), or of its prepare command's."""
    if why == "service-prepare-failed":
        # sysbench prints its errors (`Can't connect ...`) on stdout: the stream that has them
        streams = [(out / "prepare.err", "the prepare command's stderr"),
                   (out / "prepare.log", "the prepare command's stdout")]
    elif why in ("service-died", "service-not-ready"):
        streams = [(out / "service.err", "the service's stderr")]
    else:
        return ""
    for path, whose in streams:
        lines = ([line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
                 if path.is_file() else [])
        if lines:
            return f"; {whose} ends: {' | '.join(lines[-3:])[:300]}"
    return ""

