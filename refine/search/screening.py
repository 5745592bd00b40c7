"""train's screen step: many candidates in one lab boot, ranked; the top one goes to step 0.

The algorithm and why it keeps the judge honest are in search/screen.py; this module runs its
ladder through `run_ladder` like every measurement (so it lands in the record's ladder file),
stores each candidate's score and rank in the `screen` table, and hands train the profile and
shape its step 0 confirms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from threadwise.refine.measure import store
from threadwise.refine.measure.judge import Judged
from threadwise.refine.measure.ladder import Arm
from threadwise.refine.measure.rows import ScreenRow
from threadwise.refine.measure.run import LadderRun, Where, run_ladder
from threadwise.refine.measure.workload import Workload
from threadwise.refine.search import loop, screen
from threadwise.refine.search.candidate import Candidate
from threadwise.refine.search.screen_guide import ScreenLosses
from threadwise.refine.search.step_ladders import once_more_after_tcg_oops
from threadwise.refine.search.vetting import Vetted, vet
from threadwise.shape import Shape
from threadwise.synthesize.api import Profile


@dataclass(frozen=True)
class ScreenPlan:
    """What the screen measures: how many candidates, at which levels, how often."""

    width: int
    levels: tuple[int, ...]
    repeats: int


def screen_levels(levels: Sequence[int]) -> tuple[int, ...]:
    """The training's lowest and highest background levels: where the measured losses (idle) and
    gains (contention) of the bundled services lie."""
    return tuple(sorted({min(levels), max(levels)}))


@dataclass(frozen=True)
class ScreenChoice:
    """The profile step 0 confirms, its shape, why, and the null arm it is measured beside."""

    profile: Profile
    shape: Shape
    because: str
    null: Arm
    losses: ScreenLosses | None = None   # what the screen measured, for the guided order


def screen_step(start: Profile, shape: Shape, plan: ScreenPlan, *, workload: Workload, workload_toml: str,
                place: Where, ladder_file: Path, work: Path, seed: int, command: str,
                progress: Callable[[str], None]) -> ScreenChoice:
    """Screen `start` and its neighbourhood in one ladder and choose what step 0 confirms."""
    null = screen.null_arm(start)
    checked = vet(Candidate(loop.START, "the start profile", start), shape)
    start_vetted = checked if isinstance(checked, Vetted) else checked.compiled
    if start_vetted is None or plan.width <= 0:
        # a start refused before lint (loop.refine says why) or no screen asked: step 0 measures it
        return ScreenChoice(start, shape, loop.START_BECAUSE, null)
    candidates = screen.screen_candidates(start, shape, plan.width)
    primary = (workload.objective.primary.metric, workload.objective.primary.direction)
    metrics = [primary, *((s.metric, s.direction) for s in workload.objective.secondary)]
    progress(f"train: screen: the start, the null arm and {len(candidates)} candidates side by side "
             f"(levels {list(plan.levels)}, {plan.repeats} repeat(s)); the top one is confirmed next")

    def ladder(arms: list[Arm], raw: str) -> LadderRun:
        return run_ladder(workload, workload_toml, arms, ladder_file=ladder_file, place=place,
                          levels=list(plan.levels), repeats=plan.repeats, seed=seed, purpose="screen",
                          command=command, progress=progress, keep_raw=work / raw, trace=False)

    def measure(arms: list[Arm]) -> Judged:
        # the screen's boot dies of TCG's patching race as a step's does: once more, as a step's
        result = once_more_after_tcg_oops(partial(ladder, arms), "screen", "the screen", progress)
        runs.append(result.run_id)
        return result.judged

    runs: list[int] = []
    result = screen.run_screen(start_vetted, candidates, shape=shape, measure=measure, metrics=metrics,
                               levels=plan.levels, vet=vet, null=null)
    _store(ladder_file, runs[0], result, start)
    top = result.top
    for entry in sorted((e for e in result.entries if e.rank is not None), key=lambda e: e.rank or 0):
        assert entry.score is not None
        progress(f"train: screen #{entry.rank} {entry.candidate.name}: loss {entry.score.loss:.2f}, "
                 f"gain {entry.score.gain(primary[0]):.2f} (A/A units)")
    return ScreenChoice(top.candidate.profile, top.candidate.shape_for(shape), result.because(), null,
                        ScreenLosses.of_result(result))



def _store(ladder_file: Path, run_id: int, result: screen.ScreenResult, start: Profile) -> None:
    """One `screen` row per candidate: measured (arm, score, rank) or refused (why)."""
    top = result.top
    rows = []
    for entry in result.entries:
        score = entry.score
        rows.append(ScreenRow(
            run_id=run_id, arm=entry.arm if entry.vetted is not None else None,
            candidate=entry.candidate.name, description=entry.candidate.description,
            reserve_cores=(entry.vetted.shape.reserve_cores if entry.vetted is not None
                           else entry.candidate.reserve_cores or 0),
            rejected=entry.rejected, loss=score.loss if score else None,
            gain=score.gain(result.primary) if score else None, screen_rank=entry.rank,
            chosen=entry is top,
            toml_diff=loop.toml_diff(start, entry.candidate.profile, "start.toml",
                                     f"{entry.candidate.name}.toml"),
            rank_rule=screen.RANK_RULE))
    con = store.open_ladder(ladder_file)
    try:
        store.insert(con, "screen", rows)
        con.execute("CHECKPOINT")
    finally:
        con.close()
