"""Recompute every stored verdict of a ladder file from its `sample` + `cell` rows (and floors).

Shared by the committed records' test and the lab's training test: a stored comparison,
floor or step decision that the judge would not give again from the same rows fails.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from threadwise.refine import judge, stats, store
from threadwise.refine.ladder import AA_ARM, BASELINE
from threadwise.refine.loop import BEST, CANDIDATE


def _close(a: float | None, b: float) -> bool:
    if a is None:
        return math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _decision(con: duckdb.DuckDBPyConnection, run_id: int, floors_run: int | None) -> tuple[bool, str]:
    """The keep rule's decision on a step's run, recomputed from its samples and floors."""
    info = store.run_info(con, run_id)
    measured, floors = store.measured(con, run_id), judge.load_floors(con, floors_run)

    def again(reference: str, candidate: str) -> stats.LadderComparison:
        return stats.compare_arms(measured, reference, candidate, primary=info.primary,  # type: ignore[arg-type]
                                  secondary=info.secondary, floors=floors)  # type: ignore[arg-type]

    return stats.keep_decision(again(BEST, CANDIDATE), again(BASELINE, BEST), again(BASELINE, CANDIDATE))


def recompute_ladder_file(path: Path) -> int:
    """Assert every stored floor, comparison and step decision recomputes; returns how many."""
    con = store.open_ladder(path, read_only=True)
    checked = 0
    try:
        aa_runs = [r[0] for r in con.execute(store.sql("aa_runs")).fetchall()]
        floors = {}
        for aa in aa_runs:
            info = store.run_info(con, aa)
            again = stats.floors(store.measured(con, aa), BASELINE, AA_ARM,
                                 [info.primary[0], *(m for m, _ in info.secondary)], n_max=8, run_id=aa)
            stored = judge.load_floors(con, aa)
            assert {m: dict(t) for m, t in stored.by_metric.items()} == \
                {m: dict(t) for m, t in again.by_metric.items()}, f"{path}: floors of run {aa}"
            assert {m: {lv: dict(t) for lv, t in levels.items()} for m, levels in stored.by_level.items()} \
                == {m: {lv: dict(t) for lv, t in levels.items()} for m, levels in again.by_level.items()}, \
                f"{path}: per-level floors of run {aa}"
            floors[aa] = stored
            checked += 1
        rows = con.execute("SELECT DISTINCT run_id, reference, candidate FROM comparison "
                           "ORDER BY run_id, reference, candidate").fetchall()
        for run_id, reference, candidate in rows:
            before = [aa for aa in aa_runs if aa <= run_id]
            used = floors[before[-1]] if before else stats.NO_FLOORS
            info = store.run_info(con, run_id)
            result = stats.compare_arms(store.measured(con, run_id), reference, candidate,
                                        primary=info.primary,  # type: ignore[arg-type]
                                        secondary=info.secondary,  # type: ignore[arg-type]
                                        floors=used)
            again = {(c.metric, c.level): c for c in (*result.primary, *result.secondary)}
            stored = con.execute("SELECT metric, level, ratio, ci_low, ci_high, verdict, pairs "
                                 "FROM comparison "
                                 "WHERE run_id = ? AND reference = ? AND candidate = ?",
                                 [run_id, reference, candidate]).fetchall()
            assert len(stored) == len(again), (path, run_id, reference, candidate)
            for metric, level, ratio, low, high, verdict, pairs in stored:
                c = again[(metric, level)]
                where = f"{path} run {run_id} {reference}->{candidate} {metric} bg={level}"
                assert verdict == c.verdict.value, f"{where}: stored {verdict}, recomputed {c.verdict.value}"
                assert pairs == c.pairs, where
                assert _close(ratio, c.ratio) and _close(low, c.ci_low) and _close(high, c.ci_high), where
                checked += 1
        steps = con.execute("SELECT step, run_id, decision, floors_run FROM step ORDER BY step").fetchall()
        for step, run_id, decision, floors_run in steps:
            if run_id is None:
                assert decision == "rejected"
                continue
            if step == 0:
                assert decision == "kept"
                continue
            kept, why = _decision(con, run_id, floors_run)
            assert decision == ("kept" if kept else "reverted"), f"{path} step {step}: {why}"
            checked += 1
    finally:
        con.close()
    return checked
