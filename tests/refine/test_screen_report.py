"""REPORT.md's screen, null-arm and lab-minutes sections on a synthetic training record.

The record is written through the real store and judge (a screen run, a step-0 run with the null
arm, the step, screen and training rows, as train writes them), with effects of known size: the
profile loses 10% at bg=0 exactly where the null arm does, and gains 1.6x at bg=4. The sections
must name that loss the scheduler's, say "a trade-off", and recompute like every record.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests.refine.recompute import recompute_ladder_file
from threadwise.refine import report
from threadwise.refine.measure import judge, store
from threadwise.refine.measure.plan import AA_ARM, BASELINE
from threadwise.refine.measure.rows import ScreenRow, StepRow, TrainingRow
from threadwise.refine.search import screen, screen_report

LEVELS = (0, 4)
PRIMARY, SECONDARY = "rps", "p99_us"
# arm -> level -> (rps factor, p99 factor) against the default scheduler
EFFECTS = {BASELINE: {0: (1.0, 1.0), 4: (1.0, 1.0)}, AA_ARM: {0: (1.0, 1.0), 4: (1.0, 1.0)},
           screen.NULL_ARM: {0: (0.9, 1.0), 4: (0.95, 1.0)}, "start": {0: (0.9, 1.0), 4: (1.6, 0.8)},
           "c01": {0: (0.5, 2.0), 4: (1.2, 1.0)}}


def _run(con, run_id: int, purpose: str, arms: list[str], repeats: int, wall_s: float) -> None:
    store.insert(con, "run", [{
        "run_id": run_id, "started": dt.datetime(2026, 12, 5), "command": "test", "purpose": purpose,
        "workload": "svc", "workload_toml": "", "primary_metric": PRIMARY, "primary_direction": "higher",
        "secondary": json.dumps([{"metric": SECONDARY, "direction": "lower"}]),
        "levels": json.dumps(list(LEVELS)), "repeats": repeats, "arm_order": "rotate", "seed": 1,
        "window_s": 5.0, "warmup_s": 1.0, "host_kernel": "k", "vcpus": 2, "tcg": True, "scx_version": "x",
        "shape": "cores=2,threads-per-core=1", "completed": True, "wall_s": wall_s}])
    store.insert(con, "arm", [{"run_id": run_id, "arm": arm,
                               "kind": "baseline" if arm in (BASELINE, AA_ARM) else "profile",
                               "attach_s": None if arm in (BASELINE, AA_ARM) else 18.0} for arm in arms])
    cells, samples, idx = [], [], 0
    for repeat in range(1, repeats + 1):
        for arm in arms:
            for level in LEVELS:
                idx += 1
                rps, p99 = EFFECTS[arm][level]
                jitter = 1 + 0.01 * ((idx * 7) % 5 - 2)   # +-2%, the same for every run
                cells.append({"run_id": run_id, "idx": idx, "arm": arm, "level": level, "repeat": repeat,
                              "valid": True, "reasons": "", "wall_s": 5.0})
                samples += [{"run_id": run_id, "idx": idx, "metric": PRIMARY,
                             "value": 100.0 * rps * jitter / (1 + level / 4)},
                            {"run_id": run_id, "idx": idx, "metric": SECONDARY,
                             "value": 300.0 * p99 * jitter * (1 + level)}]
    store.insert(con, "cell", cells)
    store.insert(con, "sample", samples)
    judge.store_floors(con, run_id)
    for arm in arms:
        if arm != BASELINE:
            judge.judge(con, run_id, BASELINE, arm)


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "ladder.duckdb"
    con = store.open_ladder(path)
    try:
        _run(con, 1, "screen", [BASELINE, AA_ARM, screen.NULL_ARM, "start", "c01"], 1, 400.0)
        _run(con, 2, "refine-step-0", [BASELINE, AA_ARM, screen.NULL_ARM, "start"], 4, 900.0)
        judge.judge(con, 2, screen.NULL_ARM, "start")
        measured = store.measured(con, 1)
        metrics = [(PRIMARY, "higher"), (SECONDARY, "lower")]
        scores = {arm: screen.score(measured, arm, metrics, LEVELS) for arm in ("start", "c01")}
        ranked = sorted(scores, key=lambda arm: scores[arm].rank_key(PRIMARY))
        store.insert(con, "screen", [ScreenRow(
            run_id=1, arm=arm, candidate=arm if arm == "start" else "g:treatment=exclusive",
            description=arm, reserve_cores=1, loss=scores[arm].loss, gain=scores[arm].gain(PRIMARY),
            screen_rank=ranked.index(arm) + 1, chosen=ranked[0] == arm, toml_diff="",
            rank_rule=screen.RANK_RULE) for arm in ranked]
            + [ScreenRow(candidate="g:reserve", description="refused", reserve_cores=0,
                         rejected="lint: two hot threads on one core", chosen=False, toml_diff="",
                         rank_rule=screen.RANK_RULE)])
        store.insert(con, "step", [StepRow(step=0, run_id=2, candidate="start", description="start",
                                           decision="kept", reason="step 0", toml_diff="", noise=0.1,
                                           decision_seed="null", floors_run=2, chosen_because="the screen")])
        store.insert(con, "training", [TrainingRow(name="svc", workload="svc", command="threadwise train",
                                                   profile_path="artifacts/svc/svc.not-a-profile.toml",
                                                   wall_s=1500.0, limitations="[]")])
    finally:
        con.close()
    return path


def test_the_screen_section_lists_every_candidate_ranked_and_the_refused_one(record: Path) -> None:
    con = store.open_ladder(record, read_only=True)
    try:
        lines = screen_report.screen_section(con)
    finally:
        con.close()
    text = "\n".join(lines)
    assert text.startswith("## The screen") and "decides nothing" not in text and "no verdict" in text
    start_row = next(line for line in lines if "`start`" in line)
    assert start_row.startswith("| 1 | **`start`** (confirmed)") and "| 1.56x |" in start_row
    assert any(line.startswith("| 2 | `g:treatment=exclusive`") for line in lines)
    assert any(line.endswith("| loss | gain | worst |") for line in lines)
    assert start_row.endswith(" |") and start_row.rsplit("|", 2)[-2].strip().startswith("-")  # 0.9x at bg=0
    assert any("refused: lint: two hot threads" in line for line in lines)
    null_row = next(line for line in lines if line.startswith("| - | null arm"))
    assert "| null | 0.886x | 0.936x |" in null_row, null_row


def test_a_loss_the_null_arm_shares_is_the_schedulers_and_the_record_says_trade_off(record: Path) -> None:
    con = store.open_ladder(record, read_only=True)
    try:
        text = "\n".join(screen_report.null_section(con))
        minutes = "\n".join(screen_report.minutes_section(con))
        head = "\n".join(report.result_lines(con))
    finally:
        con.close()
    assert "## What scx_layered itself costs" in text
    assert "Losses scx_layered itself pays here" in text and "rps at bg=0" in text
    assert "Losses of the profile's own layers" not in text
    assert "**A trade-off:**" in text and "bg=4 1.6" in text
    assert "| 1 | screen | 10 | 6.7 |" in minutes and "| 2 | refine-step-0 | 32 | 15.0 |" in minutes
    assert "Lab time: 21.7 minutes (screen 6.7, confirm 15.0;" in head
    assert "## What scx_layered itself costs" in head


def test_the_synthetic_record_recomputes(record: Path) -> None:
    assert recompute_ladder_file(record) > 0


def test_a_screen_before_schema_7_keeps_the_rule_it_was_ranked_by() -> None:
    """onnxrt's record of 2026-12-05 (schema 6, kept as a fixture since its retraining) ranked by
    loss, then gain: the start first on its bg=4 gain (15.55 units), -0.29 units at bg=0. Read
    through the migration, its rows say `loss-then-gain`, its ranks recompute under that rule,
    and its report says so; today's rule puts first the arm with a clear gain and the most margin
    at its weakest level."""
    path = Path(__file__).resolve().parent / "fixtures" / "records" / "onnxrt-2026-12-05" / "ladder.duckdb"
    con = store.open_ladder(path, read_only=True)
    try:
        assert screen_report.rank_rule(con) == "loss-then-gain"
        assert screen_report.confirmed_candidate(con) == "start"
        section = "\n".join(screen_report.screen_section(con))
        rows = screen_report.screen_rows(con)
        run_id = rows[0][0]
        info = store.run_info(con, run_id)
        measured = store.measured(con, run_id)
    finally:
        con.close()
    assert "then by its best primary gain" in section
    metrics = [info.primary, *info.secondary]
    scores = {candidate: screen.score(measured, arm, metrics, info.levels)  # type: ignore[arg-type]
              for _run, arm, candidate, *_ in rows if arm is not None}
    today = sorted(scores, key=lambda c: scores[c].rank_key(info.primary[0]))
    assert today[0] == "onnxload:slice_us=10000"
    assert scores[today[0]].worst > 0 > scores["start"].worst
    assert recompute_ladder_file(path) > 0


def test_a_training_since_schema_7_stores_the_rule_it_ranked_by() -> None:
    """mariadb's record (2026-12-06) was ranked by today's rule and says so."""
    path = Path(__file__).resolve().parents[2] / "artifacts" / "mariadb" / "ladder.duckdb"
    con = store.open_ladder(path, read_only=True)
    try:
        assert screen_report.rank_rule(con) == screen.RANK_RULE
        section = "\n".join(screen_report.screen_section(con))
    finally:
        con.close()
    assert "the safest of them (highest worst unit) first" in section
