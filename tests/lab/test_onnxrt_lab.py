"""The bundled ONNX Runtime workload trains in the lab: onnxload's CPU inference as a service.

One short real training (observe on the host, the synthesized profile against the default
scheduler with the A/A arm interleaved, no refinement step) in the sched_ext lab VM (TCG,
2 vCPUs). The driver is a Python script: the initramfs guest carries the venv's interpreter
tree, numpy, onnx and onnxruntime on its runtime disk. Every cell must measure (onnxload's
report lines parsed, the service alive), the inference threads must be selected by a group
built from their own evidence and sit in their layer, and the record must recompute. Every
check reads what the training wrote.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.refine.recompute import recompute_ladder_file
from threadwise.errors import KeepDefault
from threadwise.refine.measure import store
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.run import Where
from threadwise.refine.measure.workload import bundled_workload_path
from threadwise.refine.outcome import candidate_path
from threadwise.refine.train import TrainOptions, train

# Two boots (step 0 and its trace cell), levels 0 and 1 at 3 repeats, 3-s windows, plus the
# service's start under TCG (the interpreter and ORT load from the runtime disk); room for a
# busy host and a turn behind another lab.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    pytest.importorskip("onnxruntime", reason="needs onnxruntime: scripts/setup-python.sh all")
    pytest.importorskip("onnx", reason="needs onnx: scripts/setup-python.sh all")
    build("spin")
    root = tmp_path_factory.mktemp("onnxrt")
    lines: list[str] = []
    options = TrainOptions(bundled_workload_path("onnxrt"), "onnxrt-test", Where(lab=True, cpus=2),
                           levels=[0, 1], repeats=3, budget=0, seed=3, observe_s=4.0, window_s=3.0,
                           profiles_dir=root / "profiles", artifacts_dir=root / "artifacts",
                           command="pytest tests/lab/test_onnxrt_lab.py")
    try:
        profile = train(options, progress=lambda line: (lines.append(line), print(line, flush=True)))
    except KeepDefault:  # "keep the default scheduler" is a result too: the record holds the candidate
        profile = candidate_path(root / "artifacts" / "onnxrt-test", "onnxrt-test")
    return profile, root / "artifacts" / "onnxrt-test", lines


def test_the_inference_threads_are_selected_by_a_group_of_their_own_evidence(trained):
    """ORT names no thread: the pool thread, the thread its import starts and the inferring main
    thread all carry the process's comm, `onnxload` (docs/refine.md "ONNX Runtime"). So every
    group of the profile matches `onnxload` (split by behaviour, scx_layered AvgRuntime, where the
    capture shows two kinds), and the first one to select them is built from their evidence,
    not the catch-all."""
    profile, _record, lines = trained
    print("\n".join(line for line in lines if line.startswith("wrote ") and "groups" in line))
    groups = tomllib.loads(profile.read_text())["group"]
    first = next((g for g in groups if "onnxload".startswith(tuple(m.rstrip("*") for m in g["match"]))),
                 None)
    assert first is not None and first["match"] != ["*"], groups
    assert first["evidence"]["names"] == ["onnxload"], first
    assert all(g["match"] in (["onnxload"], ["*"]) for g in groups), groups


def test_every_cell_measures_and_the_threads_sit_in_their_layer(trained):
    _profile, record, _lines = trained
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        cells = con.execute(
            "SELECT a.kind, c.idx, c.valid, c.reasons FROM cell c JOIN arm a USING (run_id, arm) "
            "ORDER BY c.idx").fetchall()
        measured = dict(con.execute(
            "SELECT metric, count(*) FROM sample WHERE metric IN ('inferences_per_s', 'latency_p99_us') "
            "GROUP BY metric").fetchall())
        members = con.execute("SELECT tid, comm, expected_layer, actual_layer FROM membership").fetchall()
    finally:
        con.close()
    invalid = [(idx, reasons) for _, idx, valid, reasons in cells if not valid]
    # a host this busy may disturb a cell; the driver and the service may not fail one
    assert not [r for r in invalid if "load" in r[1] or "service" in r[1]], invalid
    valid = [c for c in cells if c[2]]
    assert sum(c[0] == "baseline" for c in valid) >= 2 and sum(c[0] == "profile" for c in valid) >= 2, cells
    assert measured.get("inferences_per_s", 0) >= len(valid), measured
    assert measured.get("latency_p99_us", 0) >= len(valid), measured
    # the inferring main thread and ORT's pool thread at least, both named as the process
    assert len({tid for tid, comm, *_ in members if comm == "onnxload"}) >= 2, members
    wrong = [m for m in members if m[2] is not None and m[3] is not None and m[2] != m[3]]
    assert not wrong, wrong


def test_every_decision_recomputes_from_the_recorded_numbers(trained):
    _profile, record, _lines = trained
    assert recompute_ladder_file(record / "ladder.duckdb") > 0
