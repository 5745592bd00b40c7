"""Every notebook runs top to bottom (on a synthetic capture, so no root is needed)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from benchmarks.bulk import bulk_capture

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.name for n in NOTEBOOKS])
def test_notebook_executes(notebook, tmp_path, monkeypatch):
    capture = bulk_capture(tmp_path / "synthetic.duckdb", switches=40_000)
    monkeypatch.setenv("THREADWISE_CAPTURE", str(capture))
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert os.environ["THREADWISE_CAPTURE"] == str(capture)
