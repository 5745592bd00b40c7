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

import pytest

from tests.lab.bundle_training import Trained, check_cells_measure_and_threads_sit, train_briefly
from tests.refine.recompute import recompute_ladder_file
from threadwise.refine.measure.bundled import build

# One boot (step 0; no trace cell: bundle_training.untraced), levels 0 and 1 at 2 repeats, 3-s
# windows, plus the service's start under TCG (the interpreter and ORT load from the runtime disk); room for a
# busy host and a turn behind another lab.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    pytest.importorskip("onnxruntime", reason="needs onnxruntime: scripts/setup-python.sh all")
    pytest.importorskip("onnx", reason="needs onnx: scripts/setup-python.sh all")
    build("spin")
    return train_briefly(tmp_path_factory, "onnxrt", "tests/lab/test_onnxrt_lab.py")


def test_the_inference_threads_are_selected_by_a_group_of_their_own_evidence(trained: Trained):
    """ORT names no thread: the pool thread, the thread its import starts and the inferring main
    thread all carry the process's comm, `onnxload` (docs/bundled-workloads.md "ONNX Runtime"). So every
    group of the profile matches `onnxload` (split by behaviour, scx_layered AvgRuntime, where the
    capture shows two kinds), and the first one to select them is built from their evidence,
    not the catch-all."""
    profile = trained.profile
    groups = tomllib.loads(profile.read_text())["group"]
    first = next((g for g in groups if "onnxload".startswith(tuple(m.rstrip("*") for m in g["match"]))),
                 None)
    assert first is not None and first["match"] != ["*"], groups
    assert first["evidence"]["names"] == ["onnxload"], first
    assert all(g["match"] in (["onnxload"], ["*"]) for g in groups), groups


def test_every_cell_measures_and_the_threads_sit_in_their_layer(trained: Trained):
    members = check_cells_measure_and_threads_sit(trained.record, ("inferences_per_s", "latency_p99_us"))
    # the inferring main thread and ORT's pool thread at least, both named as the process
    assert len({tid for tid, comm, *_ in members if comm == "onnxload"}) >= 2, members


def test_every_decision_recomputes_from_the_recorded_numbers(trained: Trained):
    assert recompute_ladder_file(trained.record / "ladder.duckdb") > 0
