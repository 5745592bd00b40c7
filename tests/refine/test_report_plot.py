"""A run's plot draws quietly, also when no cell of the run was valid (issue 21: train's output
carried matplotlib's "No artists with labels found to put in legend" warning)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import duckdb

from threadwise.refine import report, store

LADDER = Path(__file__).resolve().parents[2] / "artifacts" / "rolesim" / "ladder.duckdb"


def _plot(ladder: Path, run_id: int, png: Path) -> None:
    con = store.open_ladder(ladder, read_only=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # any warning fails the test
            report.plot_run(con, run_id, png, title=f"run {run_id}")
    finally:
        con.close()
    assert png.stat().st_size > 0


def test_a_run_with_valid_cells_plots_without_warnings(tmp_path):
    _plot(LADDER, 1, tmp_path / "run1.png")


def test_a_run_without_a_valid_cell_plots_without_warnings(tmp_path):
    ladder = tmp_path / "ladder.duckdb"
    shutil.copyfile(LADDER, ladder)
    con = duckdb.connect(str(ladder))
    con.execute("UPDATE cell SET valid = false WHERE run_id = 1")
    con.close()
    _plot(ladder, 1, tmp_path / "run1.png")
