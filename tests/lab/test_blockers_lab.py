"""Who blocked whom, for real: a short rolesim ladder in the initramfs guest traces one extra cell.

One boot (TCG, 2 vCPUs): `baseline` and rolesim's trained candidate
(its record of 2026-11-26, tests/refine/fixtures/records/: latency groups `worker` and `feeder`), one level
(bg=1), one repeat, 3-s windows. The profile arm's turn ends with a trace cell: the libbpf
tracer, packed into the initramfs with its libraries, is live over its window,
its records come back over the serial console, and ingest stores the blockers of both latency
groups in the ladder file's `blocker` table. The trace cell's own metrics against the measured
cell of the same arm and level (printed) are what tracing cost.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import datafiles
from threadwise.observe import tracer_build
from threadwise.refine.measure import blockers, store
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.run import Where, arm_from_file, run_ladder
from threadwise.refine.measure.workload import bundled_workload_path, parse_workload

PROFILE = datafiles.OLD_ROLESIM_PROFILE
pytestmark = pytest.mark.timeout(1800)   # with a wait for its turn beside another lab


def test_a_profile_arm_yields_blocker_rows_from_its_trace_cell(tmp_path: Path, monkeypatch):
    if not tracer_build.binary_path().is_file():
        pytest.skip("the libbpf tracer is not built: run scripts/setup-tracer.sh (make setup does)")
    monkeypatch.delenv(blockers.TRACE_ENV, raising=False)
    build("rolesim")
    build("spin")
    text = re.sub(r"(?m)^window_s = .*$", "window_s = 3.0", bundled_workload_path("rolesim").read_text())
    workload = parse_workload(text)
    place = Where(lab=True, cpus=2)
    arms = [Arm(BASELINE), arm_from_file(PROFILE, place.shape, "rolesim")]
    ladder_file = tmp_path / "ladder.duckdb"
    result = run_ladder(workload, text, arms, ladder_file=ladder_file, place=place, levels=[1], repeats=1,
                        purpose="test", command="pytest tests/lab/test_blockers_lab.py",
                        keep_raw=tmp_path / "raw", progress=lambda line: print(line, flush=True))
    print(*result.ingested.notes, sep="\n")
    trace_idx = len(arms)  # numbered after the two measured cells
    trace = tmp_path / "raw" / "cells" / str(trace_idx) / "trace"
    assert (trace / "switch.bin").stat().st_size > 0, sorted(p.name for p in trace.iterdir())
    assert blockers.read_control(trace / "control").end_ts is not None
    agent_log = (tmp_path / "raw" / "agent.log").read_text()
    print(*(line for line in agent_log.splitlines() if "trace" in line), sep="\n")
    assert re.search(rf"trace {trace_idx}: \d+ KB; sent after \d+ s", agent_log), agent_log

    con = store.open_ladder(ladder_file, read_only=True)
    try:
        rows = con.execute("SELECT idx, arm, level, waiter_group, blocker, blocker_group, cpu, wait_s, "
                           "waits FROM blocker ORDER BY waiter_group, wait_s DESC").fetchall()
        cells = con.execute("SELECT count(*) FROM cell").fetchone()[0]
        section = blockers.report_section(con)
    finally:
        con.close()
    print(*section, sep="\n")
    assert cells == 2  # the trace cell is no measured cell
    assert rows and {r[:3] for r in rows} == {(trace_idx, "rolesim", 1)}
    assert {"worker", "feeder"} == {r[3] for r in rows}, rows
    assert all(0 < r[7] < 10 and r[8] >= 1 and r[6] in (0, 1) for r in rows), rows
    assert section[0] == "## Who blocked whom"
    assert len(result.ingested.notes) == 1 and "blocker rows" in result.ingested.notes[0]
