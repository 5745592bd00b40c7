"""Decode the libbpf tracer's binary record files into the raw tables' Arrow batches.

Problem: the tracer writes millions of fixed-size records per second (tracers/sched.h); parsing
them one by one in Python would cost more than tracing them.
Approach: each file holds one record layout, so its bytes are a numpy structured array
(`np.frombuffer`, no copy); each Arrow column is one strided copy of a field, and only the rare
task records (with names) touch Python objects. A file is read incrementally: whole records
are decoded and a truncated trailing record (a write in progress, or a tracer killed mid-write)
waits for the rest or is reported by `RecordReader.trailing`. The dtypes here must match
sched.h byte for byte: tests/observe/test_records.py compares them with the C sizes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from threadwise.observe.backend import TaskActivity
from threadwise.observe.schema import CLONE_THREAD, SCHEMAS

# enum tw_kind (sched.h)
TW_SWITCH, TW_WAKING, TW_MIGRATE, TW_NEW, TW_EXIT, TW_RENAME, TW_SEEN = range(1, 8)

SWITCH = np.dtype([("kind", "<u4"), ("cpu", "<u4"), ("ts", "<u8"), ("prev_state", "<i8"),
                   ("prev_tid", "<i4"), ("prev_prio", "<i4"), ("next_tid", "<i4"), ("next_prio", "<i4")])
WAKING = np.dtype([("kind", "<u4"), ("cpu", "<u4"), ("ts", "<u8"), ("waker_tid", "<i4"),
                   ("wakee_tid", "<i4"), ("target_cpu", "<i4"), ("is_new", "<i4"), ("current_tid", "<i4"),
                   ("context", "<i4")])
MIGRATE = np.dtype([("kind", "<u4"), ("cpu", "<u4"), ("ts", "<u8"), ("tid", "<i4"), ("orig_cpu", "<i4"),
                    ("dest_cpu", "<i4"), ("pad", "<i4")])
TASK = np.dtype([("kind", "<u4"), ("cpu", "<u4"), ("ts", "<u8"), ("tid", "<i4"), ("tgid", "<i4"),
                 ("parent_tid", "<i4"), ("parent_tgid", "<i4"), ("clone_flags", "<u8"),
                 ("comm", "S16"), ("new_comm", "S16")])

# file name -> record layout (the names sched.c writes)
FILES: dict[str, np.dtype] = {"switch.bin": SWITCH, "waking.bin": WAKING, "migrate.bin": MIGRATE,
                              "task.bin": TASK}


def _column(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    # one copy from the strided record field straight into the column's dtype (a field of a
    # structured array is never contiguous, so this always copies: the column never aliases
    # the read buffer, which RecordReader reuses)
    return pa.array(values.astype(arrow_type.to_pandas_dtype()), type=arrow_type)


def _table(name: str, columns: dict[str, np.ndarray | list]) -> pa.Table:
    schema = SCHEMAS[name]
    arrays = [c if isinstance(c, pa.Array) else
              (pa.array(c, type=f.type) if isinstance(c, list) else _column(c, f.type))
              for f, c in zip(schema, (columns[f.name] for f in schema), strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _names(raw: np.ndarray) -> list[str]:
    return [bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace") for b in raw]


def decode_switch(recs: np.ndarray) -> dict[str, pa.Table]:
    return {"raw_sched_switch": _table("raw_sched_switch", {
        "ts": recs["ts"], "cpu": recs["cpu"], "prev_tid": recs["prev_tid"],
        "prev_state": recs["prev_state"], "prev_prio": recs["prev_prio"],
        "next_tid": recs["next_tid"], "next_prio": recs["next_prio"]})}


def decode_waking(recs: np.ndarray) -> dict[str, pa.Table]:
    return {"raw_sched_waking": _table("raw_sched_waking", {
        "ts": recs["ts"], "cpu": recs["cpu"], "waker_tid": recs["waker_tid"],
        "wakee_tid": recs["wakee_tid"], "target_cpu": recs["target_cpu"],
        "is_new": recs["is_new"] != 0, "context": recs["context"], "current_tid": recs["current_tid"]})}


def decode_migrate(recs: np.ndarray) -> dict[str, pa.Table]:
    return {"raw_sched_migrate": _table("raw_sched_migrate", {
        "ts": recs["ts"], "cpu": recs["cpu"], "tid": recs["tid"], "orig_cpu": recs["orig_cpu"],
        "dest_cpu": recs["dest_cpu"]})}


def decode_task(recs: np.ndarray) -> dict[str, pa.Table]:
    """Task records split by kind into raw_task_new / _exit / _rename / _seen."""
    tables: dict[str, pa.Table] = {}
    kinds = recs["kind"]
    new = recs[kinds == TW_NEW]
    if len(new):
        flags = new["clone_flags"]
        # the thread group as the bpftrace stream defines it: the parent's for CLONE_THREAD
        tgid = np.where(flags & CLONE_THREAD, new["parent_tgid"], new["tid"])
        tables["raw_task_new"] = _table("raw_task_new", {
            "ts": new["ts"], "cpu": new["cpu"], "parent_tid": new["parent_tid"],
            "parent_tgid": new["parent_tgid"], "tid": new["tid"], "tgid": tgid,
            "clone_flags": flags, "comm": _names(new["comm"])})
    exits = recs[kinds == TW_EXIT]
    if len(exits):
        tables["raw_task_exit"] = _table("raw_task_exit", {
            "ts": exits["ts"], "cpu": exits["cpu"], "tid": exits["tid"], "tgid": exits["tgid"],
            "comm": _names(exits["comm"])})
    renames = recs[kinds == TW_RENAME]
    if len(renames):
        tables["raw_task_rename"] = _table("raw_task_rename", {
            "ts": renames["ts"], "cpu": renames["cpu"], "tid": renames["tid"],
            "old_comm": _names(renames["comm"]), "new_comm": _names(renames["new_comm"])})
    seen = recs[kinds == TW_SEEN]
    if len(seen):
        tables["raw_task_seen"] = _table("raw_task_seen", {
            "ts": seen["ts"], "tid": seen["tid"], "tgid": seen["tgid"], "comm": _names(seen["comm"])})
    return tables


DECODERS = {"switch.bin": decode_switch, "waking.bin": decode_waking, "migrate.bin": decode_migrate,
            "task.bin": decode_task}


def decode(file_name: str, data: bytes | memoryview) -> dict[str, pa.Table]:
    """Whole records of `data` (a multiple of the record size) as raw-table batches."""
    recs = np.frombuffer(data, dtype=FILES[file_name])
    return DECODERS[file_name](recs) if len(recs) else {}


@dataclass
class RecordReader:
    """Reads the tracer's files in `directory` incrementally; whole records only."""

    directory: Path
    offsets: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FILES, 0))
    records: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FILES, 0))
    # One read buffer for every call: a fresh `f.read` of 8 MB is fresh memory, faulted in page
    # by page each time. Safe to reuse because decoding copies every column out of it.
    _buffer: bytearray = field(default_factory=bytearray, repr=False)

    def read(self, *, max_bytes: int = 256 << 20) -> dict[str, list[pa.Table]]:
        """Tables decoded from what was appended since the last call."""
        out: dict[str, list[pa.Table]] = {}
        for name, dtype in FILES.items():
            path = self.directory / name
            try:
                with open(path, "rb") as f:
                    want = min(max_bytes, os.fstat(f.fileno()).st_size - self.offsets[name])
                    if want < dtype.itemsize:
                        continue
                    if len(self._buffer) < want:    # only as big as a read needs (bytearray zero-fills)
                        self._buffer = bytearray(want)
                    buffer = memoryview(self._buffer)[:want]
                    f.seek(self.offsets[name])
                    got = f.readinto(buffer)
            except FileNotFoundError:
                continue
            whole = got - got % dtype.itemsize
            if not whole:
                continue
            for table, batch in decode(name, buffer[:whole]).items():
                out.setdefault(table, []).append(batch)
            self.offsets[name] += whole
            self.records[name] += whole // dtype.itemsize
        return out

    def _sizes(self) -> dict[str, int]:
        """Current size of each record file that exists."""
        sizes = {}
        for name in FILES:
            path = self.directory / name
            if path.exists():
                sizes[name] = path.stat().st_size
        return sizes

    def trailing(self) -> dict[str, int]:
        """Bytes not read yet, per file that has any: right after a `read`, only a partial last
        record (a write in progress, or a writer that died mid-record)."""
        unread = {name: size - self.offsets[name] for name, size in self._sizes().items()}
        return {name: extra for name, extra in unread.items() if extra}

    def pending_records(self) -> int:
        """Whole records in the files that `read` has not returned yet."""
        return sum(extra // FILES[name].itemsize for name, extra in self.trailing().items())

    def incomplete(self) -> dict[str, int]:
        """Bytes of a partial last record per file (a write cut short), wherever reading is."""
        partial = {name: size % FILES[name].itemsize for name, size in self._sizes().items()}
        return {name: extra for name, extra in partial.items() if extra}


@dataclass
class TaskFollower:
    """Follows task.bin while tracing runs, on an offset of its own (RecordReader still ingests
    every record at the end): births and renames, so the observer scans /proc only when a scan
    can find something new. task.bin is small (a record per birth, exit or rename)."""

    path: Path
    offset: int = 0

    def read(self) -> TaskActivity:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return TaskActivity()
        whole = len(data) - len(data) % TASK.itemsize
        self.offset += whole
        recs = np.frombuffer(memoryview(data)[:whole], dtype=TASK)
        births = recs[recs["kind"] == TW_NEW]
        renames = recs[recs["kind"] == TW_RENAME]
        return TaskActivity(parent_tgids=set(births["parent_tgid"].tolist()),
                            comms=set(_names(births["comm"])) | set(_names(renames["new_comm"])))
