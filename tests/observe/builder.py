"""Build small synthetic captures through the real writer and finalize.sql."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

from threadwise.observe.store import SCHEMA_VERSION, CaptureWriter
from threadwise.observe.stream import SCHEMAS


def build_capture(path: Path, *, start_ts: int, end_ts: int, events: dict[str, list[tuple]],
                  target_tgids: tuple[int, ...] = (), snapshots: list[tuple] = (), nr_cpus: int = 2,
                  events_lost: int = 0, force: bool = False) -> Path:
    writer = CaptureWriter(path, force=force)
    for table, rows in events.items():
        columns = list(zip(*rows, strict=True)) if rows else [[] for _ in SCHEMAS[table]]
        writer.append(table, pa.table([list(c) for c in columns], schema=SCHEMAS[table]))
    if snapshots:
        writer.insert_rows(
            "proc_snapshot",
            ["ts", "phase", "tid", "tgid", "comm", "process_comm", "cmdline", "cgroup", "nice",
             "policy", "rt_priority", "sum_exec_runtime", "run_delay", "timeslices"],
            list(snapshots),
        )
    writer.insert_rows(
        "cpu_topology",
        ["cpu", "core_id", "package_id", "core_key", "smt_siblings", "llc_id", "llc_cpus", "online"],
        [(c, c, 0, c, [c], 0, list(range(nr_cpus)), True) for c in range(nr_cpus)],
    )
    writer.insert_rows(
        "capture",
        ["capture_id", "schema_version", "host", "kernel_release", "start_wall", "start_ts", "end_ts",
         "duration_ns", "target_kind", "target_spec", "target_tgids", "tracer_backend",
         "tracer_version", "events_recorded", "events_lost", "loss_detail", "end_reason"],
        [("synthetic", SCHEMA_VERSION, "test", "test", dt.datetime(2026, 1, 1), start_ts, end_ts,
          end_ts - start_ts, "pid", "synthetic", list(target_tgids), "synthetic", "0",
          sum(len(r) for r in events.values()), events_lost, "synthetic", "duration")],
    )
    return writer.finalize()


def snapshot(ts: int, phase: str, tid: int, tgid: int, comm: str, runtime: int) -> tuple:
    return (ts, phase, tid, tgid, comm, "proc", "proc --x", "/test", 0, "SCHED_OTHER", 0, runtime, 0, 1)
