"""The real agent on this host: an A/A ladder of rolesim (no scheduler attached, so no VM needed).

Real rolesim, real spinners, the real POSIX-sh agent and ingest: every cell
comes back with its samples and its background CPU, judged valid exactly when
its measured numbers say so, and a service that never becomes ready stops the
ladder with a clear error while the run row says where it stopped.

On a busy machine (CI shares 2 cores) the spinner of a bg=1 cell can be starved
by other work; the ladder must then call that cell invalid for that reason, and
the test checks precisely that instead of expecting a quiet machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import datafiles
from threadwise.errors import LadderIncomplete
from threadwise.refine.measure import store
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.run import run_ladder, where
from threadwise.refine.measure.validity import spinner_floor_s
from threadwise.refine.measure.workload import bundled_workload_path, load_workload, parse_workload

pytestmark = pytest.mark.slow

NEVER_READY = datafiles.text("refine/ladder-host-never-ready.toml")


def test_an_aa_ladder_runs_on_this_host_and_every_cell_is_judged(tmp_path: Path) -> None:
    build("rolesim")
    build("spin")
    path = bundled_workload_path("rolesim")
    workload = load_workload(path)
    workload = workload.model_copy(update={"objective": workload.objective.model_copy(
        update={"window_s": 2.0, "warmup_s": 0.5})})
    ladder_file = tmp_path / "aa.duckdb"
    result = run_ladder(workload, path.read_text(), [Arm(BASELINE), Arm("baseline-aa")],
                        ladder_file=ladder_file, place=where(False, 2, profiles=False), levels=[0, 1],
                        repeats=1, purpose="aa", command="pytest", progress=lambda _line: None)
    assert result.ingested.completed and result.ingested.cells == 4
    con = store.open_ladder(ladder_file, read_only=True)
    vcpus = con.execute("SELECT vcpus FROM run").fetchone()[0]
    cells = con.execute("SELECT arm, level, valid, reasons, spinner_cpu_s, wall_s FROM cell "
                        "ORDER BY idx").fetchall()
    assert [(arm, level) for arm, level, *_ in cells] == [
        ("baseline", 0), ("baseline", 1), ("baseline-aa", 0), ("baseline-aa", 1)]
    for arm, level, valid, reasons, spin_s, wall_s in cells:
        print(f"cell {arm} bg={level}: valid={valid} spinner {spin_s} s of CPU in {wall_s} s {reasons}")
        if level == 0:
            assert valid, (arm, level, reasons)
            continue
        assert spin_s > 0  # the spinner ran and its CPU time was read
        if spin_s >= spinner_floor_s(level, vcpus, wall_s):
            assert valid, (arm, level, reasons)
        else:  # starved by the machine's other work: invalid, and for that reason alone
            assert not valid, (arm, level, reasons)
            assert all(r.startswith("spinners:") for r in reasons.split("; ")), reasons
    measured = store.measured(con, result.run_id)
    for arm, level, valid, *_ in cells:
        if valid:  # statistics read only valid cells' samples
            values = measured[arm][level]["hot_chunks_per_s"].values()
            assert all(obs.value > 0 for obs in values), (arm, level)
    assert con.execute("SELECT count(*) FROM comparison WHERE run_id = ?", [result.run_id]).fetchone()[0] > 0
    con.close()


def test_a_service_that_never_becomes_ready_stops_the_ladder_clearly(tmp_path: Path) -> None:
    build("spin")
    workload = parse_workload(NEVER_READY, "never-ready.toml")
    ladder_file = tmp_path / "never.duckdb"
    with pytest.raises(LadderIncomplete) as stopped:
        run_ladder(workload, NEVER_READY, [Arm(BASELINE), Arm("baseline-aa")], ladder_file=ladder_file,
                   place=where(False, 2, profiles=False), levels=[0], repeats=1, command="pytest",
                   progress=lambda _line: None)
    assert "service-not-ready" in stopped.value.message
    hint = stopped.value.hint or ""
    assert str(ladder_file) in hint
    # the raw files of a stopped ladder are kept where the hint says (nothing lost); they are
    # this test's own debris, so it removes them (each run left a /tmp/threadwise-ladder-* behind)
    raw = Path(hint.rsplit("raw files in ", 1)[1].strip())
    assert (raw / "failed").read_text().strip() == "service-not-ready"
    shutil.rmtree(raw)
    con = store.open_ladder(ladder_file, read_only=True)
    completed, reason = con.execute("SELECT completed, stopped_reason FROM run").fetchone()
    assert not completed and "stopped after 0 of 2 cells (service-not-ready)" in reason
    con.close()
