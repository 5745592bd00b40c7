"""The libbpf tracer's binary records: layouts match sched.h, and recorded files decode.

Fixtures in fixtures/libbpf/ are the first records of a real run of the tracer on this host
(`threadwise-sched --out DIR` around `hackbench -g 1 -l 10; hackbench -g 2 -l 500`, so that
task exits come early, cut with `head -c N*size`; re-recorded for schema migration 7's waking layout).
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from threadwise.observe import records
from threadwise.observe.records import FILES, RecordReader, decode
from threadwise.observe.schema import SCHEMAS
from threadwise.observe.tracer_build import source_dir

FIXTURES = Path(__file__).parent / "fixtures" / "libbpf"
STRUCTS = {"switch.bin": "tw_switch", "waking.bin": "tw_waking", "migrate.bin": "tw_migrate",
           "task.bin": "tw_task"}


def _c_layout(tmp_path: Path) -> dict[str, dict[str, int]]:
    """sizeof and every field's offsetof, as the C compiler lays sched.h out."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler (gcc) to read sched.h's layout: apt-get install gcc")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "sched.h"', "int main(void) {"]
    for file, struct in STRUCTS.items():
        lines.append(f'printf("{file} size %zu\\n", sizeof(struct {struct}));')
        for field in FILES[file].names:
            lines.append(f'printf("{file} {field} %zu\\n", offsetof(struct {struct}, {field}));')
    lines.append("return 0; }")
    (tmp_path / "layout.c").write_text("\n".join(lines))
    subprocess.run([cc, f"-I{source_dir()}", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.c")],
                   check=True)
    out = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    layout: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        file, field, value = line.split()
        layout.setdefault(file, {})[field] = int(value)
    return layout


def test_dtypes_match_the_c_structs(tmp_path):
    layout = _c_layout(tmp_path)
    for file, dtype in FILES.items():
        assert layout[file]["size"] == dtype.itemsize, file
        for field in dtype.names:
            assert layout[file][field] == dtype.fields[field][1], (file, field)


def test_recorded_files_decode_into_the_raw_schemas():
    tables = RecordReader(FIXTURES).read()
    rows = {name: sum(t.num_rows for t in parts) for name, parts in tables.items()}
    assert rows["raw_sched_switch"] == 300 and rows["raw_sched_waking"] == 200
    assert rows["raw_sched_migrate"] == 20
    assert sum(rows[t] for t in ("raw_task_new", "raw_task_exit", "raw_task_seen")) + \
        rows.get("raw_task_rename", 0) == 120
    for name, parts in tables.items():
        assert all(t.schema == SCHEMAS[name] for t in parts), name
    switch = tables["raw_sched_switch"][0].to_pydict()
    # per CPU, each switch's next task is the following switch's previous one (a real chain)
    by_cpu: dict[int, list[tuple[int, int, int]]] = {}
    for ts, cpu, prev, nxt in zip(switch["ts"], switch["cpu"], switch["prev_tid"], switch["next_tid"],
                                  strict=True):
        by_cpu.setdefault(cpu, []).append((ts, prev, nxt))
    chained = breaks = 0
    for seq in by_cpu.values():
        seq.sort()
        for (_t0, _p0, n0), (_t1, p1, _n1) in itertools.pairwise(seq):
            chained += n0 == p1
            breaks += n0 != p1
    assert chained > 0.95 * (chained + breaks)
    # the kernel's reported states only: running, a single state bit, idle (0x80), preempted (0x100)
    assert set(switch["prev_state"]) <= {0, 1, 2, 4, 8, 16, 32, 64, 0x80, 0x100}
    seen = tables["raw_task_seen"][0].to_pydict()
    assert "hackbench" in seen["comm"] and all(c and "\0" not in c for c in seen["comm"])


def test_a_truncated_trailing_record_waits_for_the_rest(tmp_path):
    shutil.copy(FIXTURES / "switch.bin", tmp_path / "switch.bin")
    whole = (tmp_path / "switch.bin").read_bytes()
    extra = np.zeros(1, dtype=records.SWITCH)
    extra["kind"], extra["ts"], extra["prev_tid"] = records.TW_SWITCH, 42, 7
    tail = extra.tobytes()
    with open(tmp_path / "switch.bin", "ab") as f:
        f.write(tail[:13])                      # a writer cut short mid-record
    reader = RecordReader(tmp_path)
    first = reader.read()
    assert first["raw_sched_switch"][0].num_rows == 300
    assert reader.trailing() == {"switch.bin": 13}
    assert reader.read() == {}                  # nothing new that is whole
    with open(tmp_path / "switch.bin", "ab") as f:
        f.write(tail[13:])                      # the rest arrives
    again = reader.read()["raw_sched_switch"][0].to_pydict()
    assert again["ts"] == [42] and again["prev_tid"] == [7]
    assert reader.trailing() == {} and len(whole) == 300 * records.SWITCH.itemsize


def test_task_records_split_by_kind_and_thread_groups_follow_clone_flags():
    recs = np.zeros(4, dtype=records.TASK)
    recs["kind"] = [records.TW_NEW, records.TW_NEW, records.TW_RENAME, records.TW_EXIT]
    recs["tid"] = [11, 12, 11, 12]
    recs["tgid"] = [10, 12, 10, 12]
    recs["parent_tid"] = [10, 10, 0, 0]
    recs["parent_tgid"] = [10, 10, 0, 0]
    recs["clone_flags"] = [0x10000 | 0x100, 0x11, 0, 0]   # a thread, then a process (fork)
    recs["comm"] = [b"app", b"app", b"app", b"child"]
    recs["new_comm"] = [b"", b"", b"worker-0", b""]
    tables = decode("task.bin", recs.tobytes())
    new = tables["raw_task_new"].to_pydict()
    assert new["tgid"] == [10, 12]
    assert tables["raw_task_rename"].to_pydict()["new_comm"] == ["worker-0"]
    assert tables["raw_task_rename"].to_pydict()["old_comm"] == ["app"]
    assert tables["raw_task_exit"].to_pydict()["comm"] == ["child"]
    assert "raw_task_seen" not in tables


def test_an_empty_or_missing_file_decodes_to_nothing(tmp_path):
    (tmp_path / "switch.bin").write_bytes(b"")
    assert RecordReader(tmp_path).read() == {}
    assert decode("waking.bin", b"") == {}


def test_task_follower_reports_births_and_renames_once_and_waits_for_whole_records(tmp_path):
    recs = np.zeros(3, dtype=records.TASK)
    recs["kind"] = [records.TW_NEW, records.TW_RENAME, records.TW_EXIT]
    recs["tid"] = [21, 21, 21]
    recs["parent_tgid"] = [20, 0, 0]
    recs["comm"] = [b"app", b"app", b"app"]
    recs["new_comm"] = [b"", b"worker-0", b""]
    data = recs.tobytes()
    follower = records.TaskFollower(tmp_path / "task.bin")
    assert not follower.read()                          # no file yet: nothing happened
    (tmp_path / "task.bin").write_bytes(data[: records.TASK.itemsize + 5])
    first = follower.read()
    assert first.parent_tgids == {20} and first.comms == {"app"}
    with open(tmp_path / "task.bin", "ab") as f:
        f.write(data[records.TASK.itemsize + 5:])
    second = follower.read()                            # the rename, not the birth again
    assert second.parent_tgids == set() and second.comms == {"worker-0"}
    assert not follower.read()
    # the follower has its own offset: ingest still reads every record
    assert RecordReader(tmp_path).read()["raw_task_new"][0].num_rows == 1


def test_a_waking_names_its_context_and_the_task_on_the_cpu():
    """Schema migration 7: a task wakes in task context and is the task on the CPU; in an interrupt
    the waker is 0 and the task on the CPU is the one the interrupt ran on (sched.bpf.c)."""
    waking = RecordReader(FIXTURES).read()["raw_sched_waking"][0].to_pydict()
    rows = list(zip(waking["waker_tid"], waking["context"], waking["current_tid"], strict=True))
    assert {context for _, context, _ in rows} <= {0, 1, 2, 3}
    assert all(waker == current for waker, context, current in rows if context == 0)
    assert all(waker == 0 for waker, context, _ in rows if context != 0)
    assert any(context == 0 for _, context, _ in rows) and any(context != 0 for _, context, _ in rows)
