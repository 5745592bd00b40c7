"""The search's measurement in a training: one ladder run per loop step, into the record's ladder file.

Problem: the keep-only-wins loop (search/loop.py) measures through an injected `measure(arms)` and
reads back the last ladder's blocker rows and silent windows; a training must give it those over
real ladder runs, each numbered by its step (its seed, its purpose, its raw folder), stopped early
once a candidate clearly lost, judged on the pairs the search and the report read, and retried
once when the lab's emulator (not the candidate) killed the guest.

Approach: one explicit context, `Training` (the workload, where and how its ladders run), and one
small object over it, `StepLadders`, whose methods are what the loop is handed: `measure`, and
`last_ladder(load)` for its reads. What a step's ladder is asked for (seed, purpose, early stop,
extra comparisons) is `ladder_plan`, a pure function of the arms and the step, and the early-stop
decision is `lost_early`, so each can be checked alone, without a lab.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from threadwise.errors import LabError, NothingMeasured
from threadwise.refine.measure import judge, stats, store, summary
from threadwise.refine.measure.ladder import AA_ARM, BASELINE, Arm
from threadwise.refine.measure.run import LadderRun, Where, run_ladder
from threadwise.refine.search import loop
from threadwise.refine.search.screen import NULL_ARM
from threadwise.runtime.lab.agent import TCG_PATCHING_OOPS

if TYPE_CHECKING:
    import duckdb

    from threadwise.refine.measure.workload import Workload

Loaded = TypeVar("Loaded")  # a row type the loop reads of the last ladder (blockers, silences)
Metric = tuple[str, stats.Direction]


@dataclass(frozen=True)
class Training:
    """What every ladder of one training shares: the workload (and its file's text, stored with
    each run), where and how its cells run, the work directory, and where progress goes."""

    workload: Workload
    workload_toml: str
    place: Where
    levels: list[int]
    repeats: int
    seed: int
    command: str
    work: Path
    early_stop: bool
    progress: Callable[[str], None]

    @property
    def ladder_file(self) -> Path:
        return self.work / "ladder.duckdb"

    @property
    def primary(self) -> Metric:
        return (self.workload.objective.primary.metric, self.workload.objective.primary.direction)

    @property
    def secondary(self) -> list[Metric]:
        return [(s.metric, s.direction) for s in self.workload.objective.secondary]

    @property
    def metrics(self) -> list[str]:
        return [metric for metric, _ in (self.primary, *self.secondary)]


class LadderPlan(NamedTuple):
    """What one step's ladder is asked for beyond its arms."""

    seed: int
    purpose: str
    stops_early: bool  # stop once the candidate clearly lost (`lost_early`)
    also_judge: list[tuple[str, str]]  # comparisons stored beside those against the baseline
    fewer: dict[str, int]  # arms that run only their first k repeats (step 0's null arm)


def null_repeats(repeats: int) -> int:
    """How many repeats step 0's null arm runs: half the training's, at least the judge's
    minimum of pairs. The null arm is reported, never decided on (no verdict, keep rule or early
    stop reads it), so its own intervals may be wider; running half saves a training about 4 of
    its 30 lab minutes (16 cells and 4 attaches of 20-30 s at 8 repeats, docs/search.md "Time")."""
    return min(repeats, max(stats.MIN_PAIRS, -(-repeats // 2)))


def ladder_plan(arm_names: Collection[str], *, step: int, seed: int, early_stop: bool,
                repeats: int) -> LadderPlan:
    """Step `step`'s ladder plan: its own seed and purpose; a search step (best against candidate)
    may stop early and stores best -> candidate, which the loop decides from; step 0 stores the
    start against the null arm when both run, which tells what part of a loss is the profile's
    own and what part scx_layered's (report.py), the null arm at `null_repeats`."""
    searching = {loop.BEST, loop.CANDIDATE} <= set(arm_names)
    beside_null = [(NULL_ARM, loop.START)] if {NULL_ARM, loop.START} <= set(arm_names) else []
    null = null_repeats(repeats)
    return LadderPlan(seed=seed + 1 + step, purpose=f"refine-step-{step}",
                      stops_early=early_stop and searching,
                      also_judge=[(loop.BEST, loop.CANDIDATE)] if searching else beside_null,
                      fewer={NULL_ARM: null} if NULL_ARM in arm_names and null < repeats else {})


def lost_early(measured: stats.Measured, *, primary: Metric, secondary: Sequence[Metric]) -> str | None:
    """Why a search step's candidate already lost (its ladder stops there), or None: the loop's
    arms named as stats.early_loss compares them, against the run's own A/A twins."""
    return stats.early_loss(measured, baseline=BASELINE, best=loop.BEST, candidate=loop.CANDIDATE,
                            twins=(BASELINE, AA_ARM), primary=primary, secondary=secondary)


def once_more_after_tcg_oops(ladder: Callable[[str], LadderRun], name: str, what: str,
                             progress: Callable[[str], None]) -> LadderRun:
    """A ladder (`ladder(raw folder)`: `raw-NAME`), run once more in a new boot when the guest died
    of multi-threaded TCG's code-patching race (docs/lab.md: an `int3` oops while static keys are
    patched, seen when sched_ext is enabled or disabled), which is the emulator's, not the
    candidate's. `what` names the ladder in the progress line (`step 2`, `the screen`). The
    partial run stays in the ladder file; any other failure is raised."""
    try:
        return ladder(f"raw-{name}")
    except LabError as error:
        if TCG_PATCHING_OOPS not in error.message:
            raise
        progress(f"train: the lab guest oopsed ({TCG_PATCHING_OOPS}: TCG's code-patching race, "
                 f"docs/lab.md); {what}'s ladder runs once more in a new boot")
        return ladder(f"raw-{name}-again")


class StepLadders:
    """The loop's `measure` and its reads of the last ladder, over one training's ladder file.

    `runs` holds the run id of every ladder measured, in step order: the loop's measured steps
    map onto it one to one (train's `store_steps`)."""

    def __init__(self, training: Training) -> None:
        self.training = training
        self.runs: list[int] = []

    def lost_early(self, measured: stats.Measured) -> str | None:
        return lost_early(measured, primary=self.training.primary, secondary=self.training.secondary)

    def measure(self, arms: list[Arm]) -> judge.Judged:
        """One ladder of `arms` for the next step; step 0's must give the start enough pairs."""
        step = len(self.runs)
        plan = ladder_plan({arm.name for arm in arms}, step=step, seed=self.training.seed,
                           early_stop=self.training.early_stop, repeats=self.training.repeats)
        result = once_more_after_tcg_oops(partial(self._run, arms, plan), f"step{step}", f"step {step}",
                                          self.training.progress)
        self.runs.append(result.run_id)
        if not result.ingested.completed:
            self.training.progress(f"train: step {step}'s ladder {result.ingested.stopped_reason}")
        if step == 0:
            self._check_start(result)
        return result.judged

    def _run(self, arms: list[Arm], plan: LadderPlan, raw: str) -> LadderRun:
        t = self.training
        return run_ladder(t.workload, t.workload_toml, arms,
                          ladder_file=t.ladder_file, place=t.place, levels=t.levels,
                          repeats=t.repeats, seed=plan.seed, purpose=plan.purpose, command=t.command,
                          progress=t.progress, keep_raw=t.work / raw,
                          stop_when=self.lost_early if plan.stops_early else None,
                          also_judge=plan.also_judge, fewer=plan.fewer)

    def _check_start(self, result: LadderRun) -> None:
        """Step 0: fail unless the start has pairs enough, then show the run's own noise floors."""
        t = self.training
        require_pairs(t.work, t.ladder_file, result.run_id, t.workload.objective.primary.metric)
        t.progress(f"train: the run's own A/A floors at {t.repeats} pairs (the default scheduler "
                   "against itself, interleaved): " + "; ".join(
                       f"{metric} {result.floors.margin(metric, t.repeats)}" for metric in t.metrics))

    def last_ladder(self, load: Callable[[duckdb.DuckDBPyConnection, int, str], list[Loaded]],
                    ) -> Callable[[str], list[Loaded]]:
        """What the loop reads of the last measured ladder per arm, `load(con, run, arm)`: its blocker
        rows (none where no cell was traced) and its windows per level with those the service left
        without a report line (none unless its load is read from its own output)."""
        return partial(self._read_last, load)

    def _read_last(self, load: Callable[[duckdb.DuckDBPyConnection, int, str], list[Loaded]],
                   arm: str) -> list[Loaded]:
        con = store.open_ladder(self.training.ladder_file)
        try:
            return load(con, self.runs[-1], arm)
        finally:
            con.close()


def require_pairs(work: Path, ladder_file: Path, run_id: int, primary: str) -> None:
    """Fail the training unless the start profile has MIN_PAIRS valid pairs with the baseline at
    one level at least (else no verdict about it can be more than `insufficient`)."""
    con = store.open_ladder(ladder_file, read_only=True)
    try:
        best = con.execute(store.sql("most_pairs"), [run_id, BASELINE, "start", primary]).fetchone()[0]
    finally:
        con.close()
    if (best or 0) < stats.MIN_PAIRS:
        _fail(work, ladder_file, run_id, f"the start profile has {best or 0} valid pairs with the baseline "
              f"at its best level ({stats.MIN_PAIRS} needed for any verdict)")


def _fail(work: Path, ladder_file: Path, run_id: int, why: str) -> None:
    """Stop the training: no profile, no record; FAILED.md in the work directory says why."""
    con = store.open_ladder(ladder_file, read_only=True)
    try:
        counts = summary.invalid_summary(con, run_id)
        cells = summary.invalid_cells(con, run_id)
    finally:
        con.close()
    (work / "FAILED.md").write_text("\n".join([f"# Training failed: {why}", "", f"Run {run_id}: {counts}.",
                                               "", *cells, ""]))
    raise NothingMeasured(f"nothing valid enough to train on: {why}; {counts}",
                          hint=f"no profile was written; what was measured is in {work}/ (FAILED.md, "
                               "ladder.duckdb, raw-*/): fix the cause named above, then train again")
