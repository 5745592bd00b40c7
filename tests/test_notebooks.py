"""Every notebook runs top to bottom, headless, on inputs this test run has (and shows them).

NotebookClient raises on a failing cell, so "no error outputs" proves nothing;
instead each test checks what the notebook displayed: the input it was given
(not its default path), content only that input has, and its plots (PNG
outputs). Inputs:
- explore_capture: a synthetic capture (benchmarks/bulk.py), and in the bpf
  tier the shared live rolesim capture;
- compare_ladder: the ladder file refine wrote for the committed rolesim
  profile (artifacts/rolesim/ladder.duckdb: real runs, invalid cells included);
- review_profile: a profile synthesized here from the synthetic capture, and in
  the bpf tier from the live rolesim capture.
Each run prints its wall time (pytest -s shows them).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import nbformat
import pytest
from nbclient import NotebookClient

from benchmarks.bulk import bulk_capture

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Plots each notebook draws (PNG outputs), whatever its input.
PLOTS = {"explore_capture.ipynb": 4, "compare_ladder.ipynb": 2, "review_profile.ipynb": 2}
LADDER = ROOT / "artifacts" / "rolesim" / "ladder.duckdb"
REDIS_LADDER = ROOT / "artifacts" / "redis" / "ladder.duckdb"


def _run(name: str, monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[str, int]:
    """Execute notebooks/NAME with `env`; all text/plain and stream text shown, and PNGs drawn."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = ROOT / "notebooks" / name
    nb = nbformat.read(notebook, as_version=4)
    began = time.monotonic()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    print(f"notebook {name}: executed in {time.monotonic() - began:.1f} s with {env}")
    texts, images = [], 0
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            images += "image/png" in data
            texts.append(data.get("text/plain", "") + output.get("text", ""))
    text = "\n".join(texts)
    assert images >= PLOTS[name], f"{name} drew {images} plots, expected {PLOTS[name]}"
    return text, images


def _synthesize(capture: Path, out: Path, name: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "threadwise.cli", "synthesize", str(capture), "-n", name,
                           "-o", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return out


def test_every_notebook_is_run_here():
    assert {notebook.name for notebook in NOTEBOOKS} == set(PLOTS)


@pytest.fixture(scope="module")
def synthetic_capture(tmp_path_factory):
    return bulk_capture(tmp_path_factory.mktemp("notebooks") / "synthetic.duckdb", switches=40_000)


def test_explore_capture_on_a_synthetic_capture(synthetic_capture, monkeypatch):
    text, _ = _run("explore_capture.ipynb", monkeypatch, THREADWISE_CAPTURE=str(synthetic_capture))
    assert str(synthetic_capture) in text, "the notebook did not read $THREADWISE_CAPTURE"
    assert "synthetic" in text   # the capture row's tracer_backend: this capture, not a demo one
    assert "hot-*" in text and "worker-*" in text   # bulk.py's thread classes, grouped by analyze
    assert "timeline: " in text and "slices in the window" in text


def test_compare_ladder_on_the_ladder_refine_wrote(monkeypatch):
    text, _ = _run("compare_ladder.ipynb", monkeypatch, THREADWISE_LADDER=str(LADDER))
    assert str(LADDER) in text
    assert "hot_chunks_per_s" in text and "better" in text   # the run's primary metric and verdicts
    con = duckdb.connect(str(LADDER), read_only=True)
    invalid = con.execute("SELECT count(*) FROM cell WHERE NOT valid").fetchone()[0]
    con.close()
    assert f"{invalid} invalid cell(s) in the file" in text   # the count the file holds


def test_compare_ladder_shows_invalid_cells_and_their_reasons(monkeypatch):
    text, _ = _run("compare_ladder.ipynb", monkeypatch, THREADWISE_LADDER=str(REDIS_LADDER))
    assert str(REDIS_LADDER) in text and "get_rps" in text
    # the Redis record's profile cell whose spinners never ran (committed data), with its reason
    con = duckdb.connect(str(REDIS_LADDER), read_only=True)
    invalid = con.execute("SELECT reasons FROM cell WHERE NOT valid").fetchall()
    con.close()
    assert invalid, "the committed Redis record has an invalid cell to show"
    assert f"{len(invalid)} invalid cell(s) in the file" in text
    assert invalid[0][0][:60] in text


def test_review_profile_on_a_synthesized_profile(synthetic_capture, tmp_path, monkeypatch):
    profile = _synthesize(synthetic_capture, tmp_path / "bulk.toml", "bulkreview")
    text, _ = _run("review_profile.ipynb", monkeypatch, THREADWISE_PROFILE=str(profile),
                   THREADWISE_CAPTURE=str(synthetic_capture))
    assert str(profile) in text and "bulkreview" in text
    # threads placed in the groups that take them (a merged group's long list is elided by polars)
    assert "hot-0" in text and "worker-" in text
    assert "left to the catch-all layer" in text


@pytest.mark.bpf
def test_notebooks_on_a_live_rolesim_capture(rolesim_capture, tmp_path, monkeypatch):
    text, _ = _run("explore_capture.ipynb", monkeypatch, THREADWISE_CAPTURE=str(rolesim_capture))
    assert str(rolesim_capture) in text and "feeder" in text and "worker-*" in text
    profile = _synthesize(rolesim_capture, tmp_path / "rolesim.toml", "rolesimreview")
    text, _ = _run("review_profile.ipynb", monkeypatch, THREADWISE_PROFILE=str(profile),
                   THREADWISE_CAPTURE=str(rolesim_capture))
    assert "rolesimreview" in text and "worker-0" in text and "hot-0" in text
    assert "0 left to the catch-all layer" in text   # every rolesim thread is taken by a group


def test_jupyterlab_is_pinned_and_installed():
    """`make notebook` opens the notebooks in JupyterLab from .venv: pinned in requirements.lock."""
    import importlib.metadata

    root = Path(__file__).resolve().parents[1]
    pins = dict(line.split("==") for line in (root / "requirements.lock").read_text().split() if "==" in line)
    assert importlib.metadata.version("jupyterlab") == pins["jupyterlab"]
    assert "jupyter lab --notebook-dir=notebooks" in (root / "Makefile").read_text()
