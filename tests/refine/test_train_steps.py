"""train's steps, each alone and without the lab: what a step's ladder is asked for, when it stops
early, what the loop reads back of the last ladder, and how a loop result becomes stored rows.

The ladder file is the committed poolservice record (tests/refine/fixtures/records/
poolservice-2026-11-29, four runs of a real lab training: step 0, then three reverted candidates).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tests.refine.train_options import train_options
from threadwise.errors import UsageError
from threadwise.refine.measure import store
from threadwise.refine.measure.run import Where
from threadwise.refine.measure.workload import bundled_workload_path, load_workload
from threadwise.refine.search.diagnose import load_blockers, load_silences
from threadwise.refine.search.loop import BEST, CANDIDATE, START, Decision, RefineResult, Step
from threadwise.refine.search.screen import NULL_ARM
from threadwise.refine.search.step_ladders import LadderPlan, StepLadders, Training, ladder_plan, lost_early
from threadwise.refine.train import TrainOptions, free_outputs, fresh_work, step_line, store_steps
from threadwise.shape import synthetic
from threadwise.synthesize.reader import load_profile

RECORD = Path(__file__).parent / "fixtures" / "records" / "poolservice-2026-11-29"
PRIMARY = ("requests_per_s", "higher")
SECONDARY = [("acceptor_lat_p99_us", "lower")]


def training(work: Path, *, early_stop: bool = True) -> Training:
    path = bundled_workload_path("poolservice")
    return Training(workload=load_workload(path), workload_toml=path.read_text(),
                    place=Where(lab=True, cpus=2), levels=[0, 1, 2, 4], repeats=3, seed=7,
                    command="threadwise train ...", work=work, early_stop=early_stop,
                    progress=lambda line: None)


def copied_record(tmp_path: Path) -> Path:
    """The record's ladder file where a training keeps it (WORK/ladder.duckdb), writable."""
    shutil.copy(RECORD / "ladder.duckdb", tmp_path / "ladder.duckdb")
    return tmp_path


# --- what a step's ladder is asked for ------------------------------------------------------------


def test_step_zero_judges_the_start_beside_the_null_arm_and_never_stops_early() -> None:
    names = ["baseline", "baseline-aa", NULL_ARM, START]
    assert ladder_plan(names, step=0, seed=7, early_stop=True, repeats=8) == LadderPlan(
        seed=8, purpose="refine-step-0", stops_early=False, also_judge=[(NULL_ARM, START)],
        fewer={NULL_ARM: 4})
    # without the null arm (--no-null-arm) nothing more is judged, and every arm runs every repeat
    plain = ladder_plan(["baseline", "baseline-aa", START], step=0, seed=7, early_stop=True, repeats=8)
    assert plain.also_judge == [] and plain.fewer == {}


@pytest.mark.parametrize(("repeats", "null"), [(8, 4), (12, 6), (3, 2), (5, 3), (2, None), (1, None)])
def test_the_null_arm_runs_half_the_repeats_and_never_fewer_than_the_judges_minimum(repeats, null) -> None:
    plan = ladder_plan(["baseline", "baseline-aa", NULL_ARM, START], step=0, seed=1, early_stop=True,
                       repeats=repeats)
    assert plan.fewer == ({NULL_ARM: null} if null else {})


def test_a_search_step_judges_best_against_candidate_and_stops_early_only_when_asked() -> None:
    names = {"baseline", "baseline-aa", BEST, CANDIDATE}
    plan = ladder_plan(names, step=3, seed=7, early_stop=True, repeats=8)
    assert plan == LadderPlan(seed=11, purpose="refine-step-3", stops_early=True,
                              also_judge=[(BEST, CANDIDATE)], fewer={})
    assert not ladder_plan(names, step=3, seed=7, early_stop=False, repeats=8).stops_early   # --no-early-stop


# --- the early-stop decision, on the record's own runs ----------------------------------------------


def test_the_early_stop_fires_on_the_records_clear_loss_and_only_there() -> None:
    """Step 2 (`request:preemptible`) lost requests/s at bg=0 to the best (0.8x) and to the default
    scheduler (0.499x): its ladder could have stopped. Steps 1 and 3 were within noise of the best."""
    con = store.open_ladder(RECORD / "ladder.duckdb", read_only=True)
    try:
        runs = {run: store.measured(con, run) for run in (2, 3, 4)}
    finally:
        con.close()
    lost = lost_early(runs[3], primary=PRIMARY, secondary=SECONDARY)
    assert lost is not None
    assert lost.startswith("worse than the best and the default scheduler at requests_per_s bg=0 0.8 ")
    assert lost_early(runs[2], primary=PRIMARY, secondary=SECONDARY) is None
    assert lost_early(runs[4], primary=PRIMARY, secondary=SECONDARY) is None
    # the training's own stop reads the workload's objective: the same answers
    ladders = StepLadders(training(Path("unused")))
    assert [ladders.lost_early(runs[run]) for run in (2, 3, 4)] == [None, lost, None]


# --- what the loop reads back of the last ladder ----------------------------------------------------


def test_the_loop_reads_the_last_measured_ladder_of_each_arm(tmp_path: Path) -> None:
    ladders = StepLadders(training(copied_record(tmp_path)))
    ladders.runs.extend([1, 2, 3])
    silences, blockers = ladders.last_ladder(load_silences), ladders.last_ladder(load_blockers)
    con = store.open_ladder(tmp_path / "ladder.duckdb", read_only=True)
    try:
        expected = {arm: (load_silences(con, 3, arm), load_blockers(con, 3, arm))
                    for arm in (BEST, CANDIDATE)}
        step_one = load_silences(con, 2, BEST)
    finally:
        con.close()
    assert {arm: (silences(arm), blockers(arm)) for arm in (BEST, CANDIDATE)} == expected
    assert any(s for s in expected[BEST][0])   # the record's best has windows to read
    ladders.runs.pop()
    assert silences(BEST) == step_one          # always the last run measured


# --- a loop result as stored rows -------------------------------------------------------------------


def test_the_loops_steps_are_stored_with_the_run_that_measured_each(tmp_path: Path) -> None:
    """A rejected step has no run; the measured ones take the runs in order, each with its run's own
    widest A/A floor of the primary as its noise."""
    profile, _ = load_profile(RECORD / "poolservice.not-a-profile.toml")
    steps = (Step(0, START, "the start profile", "", Decision.KEPT, "first", 0, chosen_because="start"),
             Step(1, "a", "", "", Decision.REJECTED, "lint", 0, chosen_because="first failure"),
             Step(2, "b", "", "", Decision.REVERTED, "within noise", 0))
    ladder_file = copied_record(tmp_path) / "ladder.duckdb"
    con = store.open_ladder(ladder_file)
    try:
        con.execute("DELETE FROM step")
        store_steps(con, RefineResult(profile, synthetic(2), steps), [1, 2], repeats=3, primary=PRIMARY[0])
        rows = con.execute("SELECT step, run_id, candidate, decision, noise, floors_run, chosen_because "
                           "FROM step ORDER BY step").fetchall()
    finally:
        con.close()
    assert [row[:4] for row in rows] == [(0, 1, START, "kept"), (1, None, "a", "rejected"),
                                         (2, 2, "b", "reverted")]
    assert [row[5] for row in rows] == [1, None, 2]
    assert [row[6] for row in rows] == ["start", "first failure", None]
    assert math.isfinite(rows[0][4]) and rows[0][4] > 0 and math.isnan(rows[1][4])


def test_a_decided_step_is_printed_with_why_it_was_chosen() -> None:
    step = Step(4, "hot:slice_us=1000", "", "", Decision.REVERTED, "worse at bg=0", 0,
                chosen_because="p99 worse at bg=2")
    assert step_line(step) == ("train: step 4 hot:slice_us=1000 (chosen because p99 worse at bg=2): "
                               "reverted: worse at bg=0")


# --- the work directory and the outputs -------------------------------------------------------------


def options(tmp_path: Path, **changes: object) -> TrainOptions:
    return train_options(tmp_path, "rs", **changes)


def test_existing_outputs_are_refused_without_force(tmp_path: Path) -> None:
    outputs = free_outputs(options(tmp_path))
    assert outputs == (tmp_path / "profiles" / "rs.toml", tmp_path / "artifacts" / "rs")
    outputs.record.mkdir(parents=True)
    with pytest.raises(UsageError, match="artifacts/rs exists"):
        free_outputs(options(tmp_path))
    assert free_outputs(options(tmp_path, force=True)) == outputs


def test_the_last_trainings_work_is_kept_once_as_previous(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    first = fresh_work("rs", said.append)
    (first / "ladder.duckdb").write_text("first")
    second = fresh_work("rs", said.append)
    assert second == first and list(second.iterdir()) == []
    assert (tmp_path / "build" / "train" / "rs.previous" / "ladder.duckdb").read_text() == "first"
    (second / "ladder.duckdb").write_text("second")
    fresh_work("rs", said.append)           # only the one before is kept
    assert (tmp_path / "build" / "train" / "rs.previous" / "ladder.duckdb").read_text() == "second"
    assert said == ["train: the last training's work directory is now build/train/rs.previous"] * 2
