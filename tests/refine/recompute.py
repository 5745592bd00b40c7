"""Recompute every stored verdict of a ladder file from its `sample` + `cell` rows.

Shared by the committed records' test and the lab's training test: a stored comparison, floor
or step decision that the judge would not give again from the same rows fails. The judge of
schema 5 takes each comparison's noise from the same run's A/A arm (judge.twins_of), so
nothing but the run's own rows enters a verdict.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from threadwise.refine.measure import judge, stats, store
from threadwise.refine.measure.ladder import BASELINE
from threadwise.refine.search import screen, screen_report
from threadwise.refine.search.loop import BEST, CANDIDATE


def _close(a: float | None, b: float) -> bool:
    if a is None:
        return math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _again(con: duckdb.DuckDBPyConnection, run_id: int, reference: str,
           candidate: str) -> stats.LadderComparison:
    info = store.run_info(con, run_id)
    return stats.compare_arms(store.measured(con, run_id), reference, candidate,
                              primary=info.primary,  # type: ignore[arg-type]
                              secondary=info.secondary,  # type: ignore[arg-type]
                              twins=judge.twins_of(con, run_id))


def _decision(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[bool, str]:
    """The keep rule's decision on a step's run, recomputed from its samples."""
    return stats.keep_decision(_again(con, run_id, BEST, CANDIDATE), _again(con, run_id, BASELINE, BEST),
                               _again(con, run_id, BASELINE, CANDIDATE))


def _screen_again(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Every screened arm's stored loss, gain and rank, scored again from its run's samples; the
    chosen one is the top and step 0 measured it. Returns how many arms were checked."""
    if ("screen",) not in con.execute("SELECT table_name FROM information_schema.tables").fetchall():
        return 0
    rows = con.execute("SELECT run_id, arm, loss, gain, screen_rank, chosen FROM screen "
                       "WHERE screen_rank IS NOT NULL ORDER BY screen_rank").fetchall()
    if not rows:
        return 0
    run_id = rows[0][0]
    info = store.run_info(con, run_id)
    measured = store.measured(con, run_id)
    metrics = [info.primary, *info.secondary]
    scores = {arm: screen.score(measured, arm, metrics, info.levels)  # type: ignore[arg-type]
              for _run, arm, *_ in rows}
    rule = screen_report.rank_rule(con)   # the rule the training ranked by, as stored
    ranked = sorted(scores, key=lambda arm: scores[arm].rank_key(info.primary[0], rule))
    assert [arm for _run, arm, *_ in rows] == ranked, f"{path}: screen ranks ({rule})"
    for _run, arm, loss, gain, rank, chosen in rows:
        assert _close(loss, scores[arm].loss) and _close(gain, scores[arm].gain(info.primary[0])), \
            f"{path}: screen arm {arm}"
        assert chosen == (rank == 1), f"{path}: the chosen arm is the screen's top"
    return len(rows)


def recompute_ladder_file(path: Path) -> int:
    """Assert every stored floor, comparison and step decision recomputes; returns how many."""
    con = store.open_ladder(path, read_only=True)
    checked = 0
    try:
        floors = con.execute("SELECT run_id, metric, level, n, floor FROM floor ORDER BY ALL").fetchall()
        for run_id, metric, level, n, value in floors:
            again = judge.load_floors(con, run_id).floor(metric, n, level)
            assert again is not None and _close(value, again), \
                f"{path}: floor of run {run_id} {metric} bg={level}"
            checked += 1
        rows = con.execute("SELECT DISTINCT run_id, reference, candidate FROM comparison "
                           "ORDER BY run_id, reference, candidate").fetchall()
        for run_id, reference, candidate in rows:
            result = _again(con, run_id, reference, candidate)
            again = {(c.metric, c.level): c for c in (*result.primary, *result.secondary)}
            stored = con.execute("SELECT metric, level, ratio, ci_low, ci_high, verdict, pairs, noise_df "
                                 "FROM comparison WHERE run_id = ? AND reference = ? AND candidate = ?",
                                 [run_id, reference, candidate]).fetchall()
            assert len(stored) == len(again), (path, run_id, reference, candidate)
            for metric, level, ratio, low, high, verdict, pairs, df in stored:
                c = again[(metric, level)]
                where = f"{path} run {run_id} {reference}->{candidate} {metric} bg={level}"
                assert verdict == c.verdict.value, f"{where}: stored {verdict}, recomputed {c.verdict.value}"
                assert pairs == c.pairs and df == c.noise.df, where
                assert _close(ratio, c.ratio) and _close(low, c.ci_low) and _close(high, c.ci_high), where
                checked += 1
        steps = con.execute("SELECT step, run_id, decision FROM step ORDER BY step").fetchall()
        for step, run_id, decision in steps:
            if run_id is None:
                assert decision in ("rejected", "failed")
                continue
            if step == 0:
                assert decision == "kept"
                continue
            kept, why = _decision(con, run_id)
            assert decision == ("kept" if kept else "reverted"), f"{path} step {step}: {why}"
            checked += 1
        checked += _screen_again(con, path)
    finally:
        con.close()
    return checked
