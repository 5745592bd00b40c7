"""Services that need a runtime tree train in the default lab guest (initramfs + runtime disk).

Two short real trainings (observe on the host, A/A, the synthesized profile against the
default scheduler, no refinement step) in the sched_ext lab VM (TCG, 2 vCPUs):
- the bundled JVM workload (refine/workloads/poolservice.toml): OpenJDK's tree carried on the
  guest's read-only runtime disk (runtime/lab/runtimes.py);
- a CPython service with named threads (tests/lab/guest/pyservice.py) run by a venv's python:
  the venv and the base interpreter's stdlib on the disk.
Each must leave valid cells in both arms, its threads in their layers, and the guest must say
it mounted the disk. Every check reads the ladder file the training wrote.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests import datafiles
from tests.lab.bundle_training import untraced
from threadwise import givenclock
from threadwise.errors import KeepDefault
from threadwise.paths import cache_dir
from threadwise.refine.measure import store
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.run import Where
from threadwise.refine.measure.workload import bundled_workload_path
from threadwise.refine.outcome import candidate_path
from threadwise.refine.train import TrainOptions, train

# Each training boots the guest once (step 0 with its A/A arm; no trace cell), levels 0 and 1 at 2 repeats
# (as tests/lab/bundle_training.py: no check reads a verdict), 2 s windows.
pytestmark = pytest.mark.timeout(1800)

PYSERVICE = Path(__file__).parent / "guest" / "pyservice.py"
PY_WORKLOAD = datafiles.text("lab/runtimes-lab-py-workload.toml")


def python_workload(root: Path) -> Path:
    """A venv (without pip) and the service script, outside /tmp (the guest hides it), and the
    workload file naming them."""
    home = cache_dir() / "lab-tests" / "pyservice"
    venv = home / "venv"
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not (venv / "bin" / "python").exists():
        givenclock.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    script = home / "pyservice.py"
    shutil.copyfile(PYSERVICE, script)
    path = root / "pyservice.toml"
    path.write_text(PY_WORKLOAD.format(python=venv / "bin" / "python", script=script))
    return path


def trained(workload: Path, name: str, root: Path) -> tuple[Path, Path, list[str]]:
    build("spin")
    lines: list[str] = []
    options = TrainOptions(workload, name, Where(lab=True, cpus=2), levels=[0, 1], repeats=2, budget=0,
                           seed=3, observe_s=4.0, window_s=2.0, profiles_dir=root / "profiles",
                           artifacts_dir=root / "artifacts", command="pytest tests/lab/test_runtimes_lab.py",
                           null_arm=False)  # the null arm's path is tests/lab/test_train_lab.py's
    try:
        with untraced():
            profile = train(options, progress=lambda line: (lines.append(line), print(line, flush=True)))
    except KeepDefault:  # "keep the default scheduler" is a result too: the record holds the candidate
        profile = candidate_path(root / "artifacts" / name, name)
    return profile, root / "artifacts" / name, lines


def check_record(profile: Path, record: Path, lines: list[str], thread_prefix: str) -> None:
    assert profile.is_file() and "[[group]]" in profile.read_text()
    assert any("runtime disk:" in line and "trees mounted" in line for line in lines), lines
    assert (record / "REPORT.md").is_file()
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        valid = dict(con.execute(
            "SELECT a.kind, count(*) FILTER (WHERE c.valid) FROM cell c JOIN arm a USING (run_id, arm) "
            "GROUP BY a.kind").fetchall())
        members = con.execute("SELECT comm, expected_layer, actual_layer FROM membership").fetchall()
        by_membership = con.execute(
            "SELECT idx, reasons FROM cell WHERE reasons LIKE '%membership%'").fetchall()
    finally:
        con.close()
    assert valid.get("baseline", 0) >= 2 and valid.get("profile", 0) >= 2, valid
    assert any(comm.startswith(thread_prefix) for comm, *_ in members), members
    # in another layer is always wrong; in none is wrong only for a thread that has run since the
    # attach (the cell's reasons say so), not for one still parked (docs/lab.md "Membership")
    wrong = [m for m in members if m[1] is not None and m[2] is not None and m[1] != m[2]]
    assert not wrong, wrong
    assert not by_membership, by_membership


def test_a_jvm_service_trains_from_the_runtime_disk(tmp_path: Path) -> None:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac, java): apt-get install openjdk-17-jdk-headless")
    profile, record, lines = trained(bundled_workload_path("poolservice"), "poolservice-test", tmp_path)
    check_record(profile, record, lines, "request-")


def test_a_python_venv_service_trains_from_the_runtime_disk(tmp_path: Path) -> None:
    profile, record, lines = trained(python_workload(tmp_path), "pyservice-test", tmp_path)
    check_record(profile, record, lines, "py-work-")


LOAD_IS_TARGET = datafiles.text("lab/runtimes-lab-load-is-target.toml")
SYSBENCH_PROFILE = datafiles.text("lab/runtimes-lab-sysbench-profile.toml")


def test_a_cpu_bound_load_that_is_the_workload_is_measured_and_its_threads_found(tmp_path: Path) -> None:
    """No service: each window runs `sysbench cpu`, which is the target. The generator rule must
    not call it saturated (it is meant to be busy), it runs as an ordinary task (not under FIFO),
    and the mid-window membership probe finds its threads in their layer."""
    if shutil.which("sysbench") is None:
        pytest.skip("needs sysbench: apt-get install sysbench (scripts/setup-system.sh)")
    from threadwise.refine.measure.ladder import BASELINE, Arm
    from threadwise.refine.measure.run import arm_from_file, run_ladder
    from threadwise.refine.measure.workload import parse_workload

    build("spin")
    profile = tmp_path / "sysbench-lw.toml"
    profile.write_text(SYSBENCH_PROFILE)
    place = Where(lab=True, cpus=2)
    arms = [Arm(BASELINE), arm_from_file(profile, place.shape, "sysbench")]
    ladder_file = tmp_path / "ladder.duckdb"
    run_ladder(parse_workload(LOAD_IS_TARGET), LOAD_IS_TARGET, arms, ladder_file=ladder_file, place=place,
               levels=[0, 1], repeats=1, purpose="test", command="pytest tests/lab/test_runtimes_lab.py",
               keep_raw=tmp_path / "raw", progress=lambda line: print(line, flush=True))
    plan = (tmp_path / "raw" / "plan.sh").read_text()
    assert "load_cmd() { exec sysbench cpu" in plan, plan   # not under chrt -f
    con = store.open_ladder(ladder_file, read_only=True)
    try:
        cells = con.execute("SELECT arm, level, valid, reasons FROM cell ORDER BY idx").fetchall()
        members = con.execute("SELECT idx, comm, expected_layer, actual_layer FROM membership").fetchall()
    finally:
        con.close()
    assert all(valid for _, _, valid, _ in cells), cells
    assert len(cells) == 4
    assert members and all(comm == "sysbench" and expected == "sysbench" and actual in ("sysbench", None)
                           for _, comm, expected, actual in members), members
    # the two workers are in their layer in each probed cell; placed nowhere (None) is only the
    # exec'd leader, asleep in join with its re-match pending, which the cell's validity allowed
    for idx in {idx for idx, _, _, _ in members}:
        placed = [actual for i, _, _, actual in members if i == idx and actual == "sysbench"]
        assert len(placed) >= 2, (idx, members)
