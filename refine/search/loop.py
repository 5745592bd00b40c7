"""The keep-only-wins refinement loop, over an injected measurement.

Problem: training a profile means trying small changes and keeping only those
that measurably improve the workload's own metric under background load, on
a machine whose noise is comparable to the effects. A change that helps at
one level and hurts at another, or that buys throughput with tail latency,
must not be kept, and every decision must be recorded with the numbers it
came from, so that a report can recompute it and a regression is never
hidden.

Approach (docs/refine.md "Refinement"):
- Every ladder also measures `baseline-aa`, the default scheduler again: its pairs with the
  baseline are the noise every verdict of that ladder takes, level by level (stats.py).
- Step 0 measures `baseline` (no profile: the kernel's default scheduler)
  and the start profile in one ladder; the start becomes the first best
  whether or not it beats the baseline (step 0's decision is `kept` by
  definition, and `vs_baseline.wins` says plainly whether it won).
- Each later step takes the first untried candidate of `candidates(best,
  shape)` in the guided order (guide.py: after every ladder, the diagnosis of
  the best against the baseline, diagnose.py, puts first what can fix the
  worst failure, or with none left what sits nearest a floor; `blockers(arm)`
  gives the last ladder's blocker rows of an arm, when the cells were traced,
  and `silences(arm)` its windows without a report line from the service,
  which come first)
  and records why (`Step.chosen_because`), vets it (validate, compile,
  oracle, lint; a rejected candidate is recorded with its reason and costs
  no measurement), then measures
  `baseline`, `baseline-aa`, `best` and `candidate` in ONE call (one interleaved ladder) and
  keeps the candidate only if `stats.keep_decision` says so: the Pareto
  rule against the best (no objective metric worse at any level, one better
  somewhere), so a change that fixes a secondary while the primary holds is
  kept; or else the trade rule against the baseline measured in the same
  ladder (no new loss, better than the best on one of the best's losses,
  worse than the best only where it does not lose to the baseline, the
  primary's win kept). After a
  keep the candidates are generated afresh from the new best; a configuration
  (profile TOML and reserve) is never tried twice.
- `budget` counts measured candidates; the loop also ends when no untried
  candidate is left.
- The measurement is a function `measure(arms) -> Judged` over the ladder's own arms (each
  built from its `Vetted`: the config vet compiled; the baseline with nothing attached): the
  figures (arm -> level -> metric -> repeat -> valid observation) and the comparisons the judge
  stored, which the loop decides from (a bare `Measured` is judged here: tests); the loop does
  no I/O besides its callbacks: `on_step`, which gets every Step as soon as it is decided, and
  `blockers`, which reads the last ladder's blocker rows. Verdicts depend
  on the samples only (the A/A arm's are among them), and the samples are kept in the Step,
  so every interval,
  verdict and decision can be recomputed from the record.
- `refine()` reads as its steps over one `Search` (the measurement, the objective, the callbacks,
  the steps so far): `measure_start` (step 0) -> the first `Best`, then per guided choice
  `try_candidate` -> `Tried` (the best after it and its step), each callable alone (tests).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from threadwise.errors import ThreadwiseError
from threadwise.refine.measure.judge import Judged
from threadwise.refine.measure.ladder import AA_ARM, Arm
from threadwise.refine.measure.stats import (
    Direction,
    LadderComparison,
    Measured,
    compare_arms,
    keep_decision,
)
from threadwise.refine.search.diagnose import Blocker, Failure, Silence, diagnose, rows_of, silent_failures
from threadwise.refine.search.guide import Choice, order
from threadwise.refine.search.mutate import Candidate, all_mutations
from threadwise.refine.search.vetting import Rejected, Vetted
from threadwise.refine.search.vetting import vet as default_vet
from threadwise.shape import Shape
from threadwise.synthesize.api import LayerConfig, Profile, toml_text

BASELINE, START, BEST, CANDIDATE = "baseline", "start", "best", "candidate"


class Decision(StrEnum):
    KEPT = "kept"
    REVERTED = "reverted"
    REJECTED = "rejected"
    FAILED = "failed"  # its ladder did not finish (the lab failed): the search stops there


Measure = Callable[[list[Arm]], Judged | Measured]   # Judged: with the comparisons stored
Candidates = Callable[[Profile, Shape], list[Candidate]]
Vet = Callable[[Candidate, Shape], Vetted | Rejected]
Metric = tuple[str, Direction]
Guide = Callable[[Profile, Sequence[Candidate], Sequence[Failure], Sequence[Blocker]], list[Choice]]
Blockers = Callable[[str], Sequence[Blocker]]
Silences = Callable[[str], Sequence[Silence]]
START_BECAUSE = "the start profile: measured first, against the baseline (step 0)"


@dataclass(frozen=True)
class Step:
    """One recorded step.

    `diff` is the unified diff of the written TOMLs (best -> candidate; step 0:
    nothing -> start); `reserve_cores` the candidate's compile-time reserve.
    Measured steps carry `measured` (the samples), `vs_best` (which decided,
    absent at step 0) and `vs_baseline`; a rejected step carries neither.
    """

    index: int
    candidate: str
    description: str
    diff: str
    decision: Decision
    reason: str
    reserve_cores: int
    vs_best: LadderComparison | None = None
    vs_baseline: LadderComparison | None = None
    measured: Measured | None = None
    config: LayerConfig | None = None  # what the candidate compiled to (vetted steps)
    notes: tuple[str, ...] = ()
    chosen_because: str = ""  # why the search tried it now (guide.Choice.because)

    @property
    def measured_run(self) -> bool:
        """Whether a ladder run measured it (rejected and failed steps have none)."""
        return self.decision in (Decision.KEPT, Decision.REVERTED)


@dataclass(frozen=True)
class RefineResult:
    """The best profile, the shape it was kept on (its reserve), and every step."""

    best: Profile
    shape: Shape
    steps: tuple[Step, ...]

    @property
    def start_wins(self) -> bool:
        """Whether the start profile beat the baseline at step 0."""
        first = self.steps[0].vs_baseline
        return first is not None and first.wins

    @property
    def measured_candidates(self) -> int:
        return sum(1 for s in self.steps[1:] if s.measured_run)


def toml_diff(before: Profile | None, after: Profile, before_name: str, after_name: str) -> str:
    """Unified diff of the two profiles as written TOML."""
    old = toml_text(before).splitlines(keepends=True) if before is not None else []
    return "".join(difflib.unified_diff(old, toml_text(after).splitlines(keepends=True),
                                        fromfile=before_name, tofile=after_name))


def _key(profile: Profile, shape: Shape) -> tuple[str, int]:
    return toml_text(profile), shape.reserve_cores


class Diagnosis(NamedTuple):
    """What the best fails against the baseline, worst first (its silent windows first), and its
    blocker rows: what the guide orders the next candidates by."""

    failures: list[Failure]
    blocking: list[Blocker]


class Best(NamedTuple):
    """The current best: its profile, the shape it was kept on, its arm (compiled once, when it was
    vetted) and its diagnosis from the last ladder that measured it."""

    profile: Profile
    shape: Shape
    arm: Arm
    diagnosis: Diagnosis


@dataclass
class Search:
    """What every step of one search shares: the measurement, the objective, the callbacks, and the
    steps recorded so far."""

    measure: Measure
    primary: Metric
    secondary: Sequence[Metric]
    blockers: Blockers | None
    silences: Silences | None
    on_step: Callable[[Step], None] | None
    steps: list[Step] = dataclasses.field(default_factory=list)

    def record(self, step: Step) -> None:
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)

    def run(self, arms: list[Arm]) -> Judged:
        found = self.measure(arms)
        return found if isinstance(found, Judged) else Judged(found, {})

    def compare(self, run: Judged, reference: str, candidate: str) -> LadderComparison:
        """The comparison the judge stored for the run; computed here only where the measurement
        stored none (a measure function without a ladder file: tests, benchmarks)."""
        stored = run.comparisons.get((reference, candidate))
        if stored is not None:
            return stored
        twins = (BASELINE, AA_ARM) if AA_ARM in run.measured else None  # the run's own A/A noise
        return compare_arms(run.measured, reference, candidate, primary=self.primary,
                            secondary=self.secondary, twins=twins)

    def diagnose(self, arm: str, vs_baseline: LadderComparison) -> Diagnosis:
        """The failures of the best (`arm`) against the baseline (its silent windows first), and
        its blocker rows."""
        silent = (silent_failures(self.silences(arm), arm, primary=self.primary)
                  if self.silences is not None else [])
        ratios = diagnose(rows_of(vs_baseline), primary=self.primary, secondary=self.secondary)
        return Diagnosis(silent + ratios, list(self.blockers(arm)) if self.blockers is not None else [])


def refine(start: Profile, *, shape: Shape, measure: Measure, primary: Metric,
           secondary: Sequence[Metric] = (), budget: int,
           candidates: Candidates = all_mutations, vet: Vet = default_vet, guide: Guide = order,
           blockers: Blockers | None = None, silences: Silences | None = None,
           on_step: Callable[[Step], None] | None = None, references: Sequence[Arm] = (),
           start_because: str = START_BECAUSE) -> RefineResult:
    """Refine `start` by keeping only candidates that beat the current best (the Pareto rule).

    `references`: more arms for step 0's ladder (the null arm: what scx_layered itself costs);
    `start_because`: why the start is measured (the screen's choice, when a screen chose it)."""
    if budget < 0:
        raise ValueError(f"budget is a number of measured candidates, got {budget}")
    search = Search(measure, primary, secondary, blockers, silences, on_step)
    best = measure_start(search, start, shape, vet=vet, references=references, because=start_because)
    tried = {_key(start, shape)}
    used, index = 0, 1
    while used < budget:
        pool = [c for c in candidates(best.profile, best.shape)
                if _key(c.profile, c.shape_for(best.shape)) not in tried]
        kept = False
        while pool and used < budget:
            choice = guide(best.profile, pool, *best.diagnosis)[0]
            pool = [c for c in pool if c is not choice.candidate]
            key = _key(choice.candidate.profile, choice.candidate.shape_for(best.shape))
            if key in tried:
                continue  # another operator's candidate made the same profile
            tried.add(key)
            best, step = try_candidate(search, best, choice, vet=vet, index=index)
            if step.decision is Decision.FAILED:
                break   # the lab failed: the steps so far stand (try_candidate)
            index += 1
            if step.measured_run:
                used += 1
            kept = step.decision is Decision.KEPT
            if kept:
                break
        if not kept:
            break  # every candidate of this best was tried, the budget is spent, or the lab failed
    return RefineResult(best.profile, best.shape, tuple(search.steps))


class StartVetted(NamedTuple):
    """The start's vetting, what it compiled to (also when lint refused it), and a note for step 0."""

    checked: Vetted | Rejected
    compiled: Vetted
    note: str


class Tried(NamedTuple):
    """A search step's outcome: the best after it, and the step as recorded."""

    best: Best
    step: Step


def vet_start(start: Profile, shape: Shape, vet: Vet) -> StartVetted:
    """The start's vetting, what it compiled to, and a note for its step: a start refused by lint
    alone is measured anyway (it is the profile being trained), any other refusal is an error."""
    checked = vet(Candidate(START, "the start profile", start), shape)
    note = ""
    if isinstance(checked, Rejected):
        if checked.stage != "lint":
            raise ThreadwiseError(
                f"the start profile cannot be measured ({checked.stage}): {checked.reason}",
                hint="check it with `threadwise validate` and `threadwise compile --check`")
        note = (f"; it has lint errors on {shape.describe()} ({checked.reason}) and is measured "
                "anyway: it is the profile being trained")
    # refused by lint alone (above), the start compiled: it is measured from what vet compiled
    compiled = checked if isinstance(checked, Vetted) else checked.compiled
    assert compiled is not None, "vet keeps the compiled profile of a lint refusal"
    return StartVetted(checked, compiled, note)


def measure_start(search: Search, start: Profile, shape: Shape, *, vet: Vet, references: Sequence[Arm],
                  because: str) -> Best:
    """Step 0: the start against the baseline (and `references`); it is the first best by definition."""
    checked, compiled, note = vet_start(start, shape, vet)
    start_arm = compiled.arm(START)
    run = search.run([Arm(BASELINE), Arm(AA_ARM), *references, start_arm])
    vs_baseline = search.compare(run, BASELINE, START)
    search.record(Step(
        0, START, "the start profile", toml_diff(None, start, "/dev/null", f"{START}.toml"),
        Decision.KEPT, f"the start profile is the first best (step 0 keeps it by definition){note}"
        f"; against the baseline it {vs_baseline.reason}", shape.reserve_cores,
        vs_baseline=vs_baseline, measured=run.measured,
        config=checked.config if isinstance(checked, Vetted) else None,
        notes=checked.notes if isinstance(checked, Vetted) else (), chosen_because=because))
    return Best(start, shape, start_arm, search.diagnose(START, vs_baseline))


def try_candidate(search: Search, best: Best, choice: Choice, *, vet: Vet, index: int) -> Tried:
    """Step `index`: vet the chosen candidate, measure it beside the best, decide, record; returns
    the best after it (the candidate if kept, else the best with this ladder's diagnosis) and the
    step. A rejected candidate costs no measurement; a ladder that fails ends the search."""
    candidate = choice.candidate
    cand_shape = candidate.shape_for(best.shape)
    diff = toml_diff(best.profile, candidate.profile, f"{BEST}.toml", f"{candidate.name}.toml")
    checked = vet(candidate, best.shape)
    if isinstance(checked, Rejected):
        step = Step(index, candidate.name, candidate.description, diff, Decision.REJECTED,
                    f"rejected before measuring ({checked.stage}): {checked.reason}",
                    cand_shape.reserve_cores, chosen_because=choice.because)
        search.record(step)
        return Tried(best, step)
    try:
        run = search.run([Arm(BASELINE), Arm(AA_ARM), dataclasses.replace(best.arm, name=BEST),
                          checked.arm(CANDIDATE)])
    except ThreadwiseError as error:
        # The lab failed under this candidate (a guest crash, a cut run). Nothing measured
        # is lost: the steps so far stand, and this one says where and why the search
        # stopped (a Redis search of 2026-11-25 lost seven measured steps to one crash).
        why = error.message.splitlines()[0]
        step = Step(index, candidate.name, candidate.description, diff, Decision.FAILED,
                    f"not measured: its ladder did not finish ({why}); the search stopped here",
                    cand_shape.reserve_cores, config=checked.config,
                    notes=checked.notes, chosen_because=choice.because)
        search.record(step)
        return Tried(best, step)
    vs_best = search.compare(run, BEST, CANDIDATE)
    vs_base = search.compare(run, BASELINE, CANDIDATE)
    best_vs_base = search.compare(run, BASELINE, BEST)
    kept, why = keep_decision(vs_best, best_vs_base, vs_base)
    decision = Decision.KEPT if kept else Decision.REVERTED
    step = Step(index, candidate.name, candidate.description, diff, decision,
                f"{decision.value} against the best ({why}); against the baseline it {vs_base.reason}",
                cand_shape.reserve_cores, vs_best=vs_best, vs_baseline=vs_base,
                measured=run.measured, config=checked.config, notes=checked.notes,
                chosen_because=choice.because)
    search.record(step)
    if kept:
        return Tried(Best(candidate.profile, cand_shape, checked.arm(CANDIDATE),
                          search.diagnose(CANDIDATE, vs_base)), step)
    # what the best still fails in this ladder (not what the reverted candidate broke)
    return Tried(best._replace(diagnosis=search.diagnose(BEST, best_vs_base)), step)
