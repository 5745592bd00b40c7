"""A run's plot draws quietly, also when no cell of the run was valid (issue 21: train's output
carried matplotlib's "No artists with labels found to put in legend" warning)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import duckdb

from threadwise.refine import report
from threadwise.refine.measure import store

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


# poolservice's record of 2026-11-29: four runs, insufficient verdicts and invalid cells to draw
POOLSERVICE = Path(__file__).resolve().parent / "fixtures" / "records" / "poolservice-2026-11-29" / \
    "ladder.duckdb"


def _current(ladder: Path, directory: Path) -> Path:
    """A copy of a committed ladder file at this threadwise's ladder schema (opened writable once, as
    `threadwise rejudge` would: the plots read the file as it is)."""
    copy = directory / f"{ladder.parent.name}.duckdb"
    shutil.copyfile(ladder, copy)
    store.open_ladder(copy).close()
    return copy


def _stored(ladder: Path, run_id: int) -> list[tuple]:
    con = duckdb.connect(str(ladder), read_only=True)
    try:
        return con.execute("SELECT metric, level, ratio, ci_low, ci_high, verdict, coalesce(pairs, 0) "
                           "FROM comparison WHERE run_id = ? AND reference = 'baseline'", [run_id]).fetchall()
    finally:
        con.close()


def test_the_png_shows_every_objective_metric_its_stored_intervals_and_verdicts(tmp_path):
    """Issue 34: the ladder PNG plotted only the primary metric, with unlabelled range bars, no verdicts,
    and insufficient levels drawn like measured ones."""
    from threadwise.refine import plots

    ladder = _current(POOLSERVICE, tmp_path)
    con = store.open_ladder(ladder, read_only=True)
    try:
        info = store.run_info(con, 4)
        figure = plots.ladder_figure(con, 4, title="poolservice: run 4")
    finally:
        con.close()
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    axes = figure.get_axes()
    assert len(axes) == 2 * len(metrics) and len(metrics) == 2
    titles = [ax.get_title() for ax in axes]
    for metric in metrics:
        assert any(title.startswith(f"{metric} (") for title in titles), titles
        assert f"{metric}: stored verdicts, bars: their 95% interval" in titles
    ratio_axes = axes[1::2]
    words = [text.get_text() for ax in ratio_axes for text in ax.texts]
    stored = _stored(ladder, 4)
    # every stored verdict is written at its point, insufficient ones with their pairs
    def word(verdict: str, pairs: int) -> str:
        return plots.VERDICT_STYLE[verdict][0] + (
            f" ({pairs} pair{'s' * (pairs != 1)})" if verdict == "insufficient" else "")

    assert sorted(words) == sorted(word(v, pairs) for *_rest, v, pairs in stored), words
    # the bars are the intervals the judge stored, not recomputed
    bars = {(round(min(seg[:, 1]), 6), round(max(seg[:, 1]), 6)) for ax in ratio_axes
            for container in ax.containers for seg in container.lines[2][0].get_segments()}
    for _metric, _level, _ratio, low, high, verdict, _pairs in stored:
        if verdict != "insufficient":
            assert (round(low, 6), round(high, 6)) in bars
    # insufficient levels are hollow markers without a bar
    hollow = [line for ax in ratio_axes for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    assert len(hollow) == sum(1 for *_rest, v, _pairs in stored if v == "insufficient") > 0
    assert "4 of 48 cells invalid" in figure._suptitle.get_text()


def test_every_committed_training_record_plots_its_last_run_quietly(tmp_path):
    for committed in sorted(LADDER.parents[1].glob("*/ladder.duckdb")):
        ladder = _current(committed, tmp_path)
        con = store.open_ladder(ladder, read_only=True)
        try:
            last = con.execute("SELECT max(run_id) FROM run").fetchone()[0]
        finally:
            con.close()
        _plot(ladder, last, tmp_path / f"{committed.parent.name}-{last}.png")
