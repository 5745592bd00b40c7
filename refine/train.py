"""`threadwise train`: observe -> analyze -> synthesize -> refine, then the profile and its record.

Problem: a profile is only worth something once it is measured against the
kernel's default scheduler on the workload's own metric under background
load, and a reviewer must be able to check that claim from what is committed.

Approach: observe the workload on this host (eBPF needs no sched_ext) while
its service runs under its load, synthesize a profile from the capture
(each printed as the `threadwise` command a user would type; observe and
analyze run as those commands, synthesize in-process through its builder, so
the start profile is the typed one it built, not its TOML read back), then run the
keep-only-wins loop (`loop.py`) whose every measurement is one ladder run
(`run.py`) into the record's ladder file. The committed outputs are written
last and atomically: `profiles/NAME.toml` (the best profile, with a header
naming the command, the date and the record) and `artifacts/NAME/`
(REPORT.md, plots, the ladder file), all generated from the ladder file.

`train()` reads as its steps, each a function of the options and one explicit `Training` context
(search/step_ladders.py) with a typed result: `observe_and_synthesize` -> the start Profile,
`screen_start` -> the ScreenChoice step 0 confirms, `confirm` -> `Searched` (the loop's result and
the ladder run of each measured step), `record` -> the profile path, through `write_record` ->
`Recorded` and `publish`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from threadwise.errors import KeepDefault, ThreadwiseError, UsageError
from threadwise.paths import write_output
from threadwise.refine import outcome, report
from threadwise.refine.measure import judge, stats, store
from threadwise.refine.measure.rows import StepRow, TrainingRow
from threadwise.refine.measure.run import Where
from threadwise.refine.measure.service import RunningService
from threadwise.refine.measure.workload import Workload, load_workload, render_argv
from threadwise.refine.search import loop, screening
from threadwise.refine.search.diagnose import load_blockers, load_silences
from threadwise.refine.search.loop import RefineResult, Step
from threadwise.refine.search.screen_guide import ScreenAwareGuide
from threadwise.refine.search.step_ladders import StepLadders, Training
from threadwise.runtime.lab.turns import host_slots, take_turn
from threadwise.shape import Shape
from threadwise.synthesize.api import dumps, load_profile, synthesize_capture, toml_text

if TYPE_CHECKING:   # the profile model loads with synthesize, inside train()
    import duckdb

    from threadwise.analyze import Analysis
    from threadwise.refine.search.candidate import Candidate
    from threadwise.synthesize.api import Profile


@dataclass(frozen=True)
class TrainOptions:
    workload_path: Path
    name: str
    place: Where
    levels: list[int]
    repeats: int
    budget: int
    seed: int = 1
    observe_s: float = 8.0
    window_s: float | None = None  # overrides the workload's window (short demo runs)
    profiles_dir: Path = Path("profiles")
    artifacts_dir: Path = Path("artifacts")
    force: bool = False
    command: str = ""
    candidates: Callable | None = None  # mutation source (default: every operator)
    start_profile: Path | None = None  # refine this profile instead of observing and synthesizing
    skip: tuple[str, ...] = ()  # candidate names not to measure (a previous record measured them)
    early_stop: bool = True  # a step's ladder stops once its candidate clearly lost (stats.early_loss)
    screen_width: int = 0  # candidates screened beside the start before step 0 (0: no screen)
    screen_repeats: int = 1  # repeats of the screen's ladder (search/screen.py)
    null_arm: bool = True  # step 0 measures the null arm too: what scx_layered itself costs


def _step_failed(args: list[str], error: ThreadwiseError) -> ThreadwiseError:
    """A failed step of the pipeline, named by the command a user would type to run it alone."""
    return ThreadwiseError(f"train step failed: threadwise {shlex.join(args)}: {error.message}",
                           hint=error.hint)


def observe_workload(workload: Workload, capture: Path, seconds: float, work: Path,
                     progress: Callable[[str], None]) -> None:
    """A capture of the workload under its own load, taken on this host, in this process (printed
    as the `threadwise observe` command that does the same).

    It takes the whole host's turn (runtime/lab/turns.py), as the test suite's ground-truth
    captures do: a lab VM claims the host at nice -20, and a workload captured beside one is
    starved into other behaviour. Measured (2026-11-29): `threadwise demo` observed rolesim while a
    test's lab VM ran; hot-0 ran in 22-us slices (p50), read as no compute thread, got the
    default treatment, and the profile lost to the default scheduler (hot 0.90x at bg=0, 1.04x at
    bg=2, where the synthesized profile of a quiet capture gains about 2x)."""
    with take_turn(host_slots(), lambda line: progress(f"train: capture: {line}")):
        _observe_workload(workload, capture, seconds, work, progress)


def _observe_workload(workload: Workload, capture: Path, seconds: float, work: Path,
                      progress: Callable[[str], None]) -> None:
    # deferred: loads duckdb, numpy and pyarrow (the tracer's ingest); `threadwise --help` imports this module
    from threadwise.observe.capture import observe
    from threadwise.observe.target import Target

    def trace(target: Target, args: list[str]) -> None:
        progress(f"$ {shlex.join(['threadwise', *args])}")
        try:
            result = observe(target, capture, duration_s=seconds, force=True, progress=progress)
        except ThreadwiseError as error:
            raise _step_failed(args, error) from error
        for warning in result.warnings:
            progress(f"warning: {warning}")
        progress(f"wrote {result.path}: {result.duration_s:.2f} s, {result.events:,} events "
                 f"({result.events_per_s:,.0f}/s), {result.events_lost:,} lost "
                 f"({result.switch_gaps:,} switch-chain gaps), {result.target_threads} target threads, "
                 f"ended by {result.end_reason}")

    common = ["-d", f"{seconds:g}s", "-o", str(capture), "--force"]
    if workload.service is None:  # the load command is the workload
        argv = render_argv(list(workload.load.command or []), window_s=max(seconds, 1.0))
        trace(Target.from_options(pid=None, comm=None, cgroup=None, command=argv),
              ["observe", *common, "--", *argv])
        return
    with RunningService(workload, work) as service:
        progress(f"train: {workload.name} service ready (pid {service.pid}); load running")
        service.start_load()
        trace(Target.from_options(pid=service.pid, comm=None, cgroup=None, command=None),
              ["observe", "--pid", str(service.pid), *common])


def analyze_once(capture: Path, progress: Callable[[str], None]) -> Analysis:
    """The capture's analysis, computed once: printed as `threadwise analyze CAPTURE` prints it, and
    handed on to synthesize."""
    # deferred: loads polars, duckdb and sklearn; `threadwise --help` imports this module
    from threadwise.analyze import analyze_capture
    from threadwise.analyze.render import render

    args = ["analyze", str(capture)]
    progress(f"$ {shlex.join(['threadwise', *args])}")
    try:
        analysis = analyze_capture(capture)
    except ThreadwiseError as error:
        raise _step_failed(args, error) from error
    progress(render(analysis).rstrip("\n"))
    return analysis


def synthesize_start(capture: Path, name: str, shape: Shape, out: Path,
                     progress: Callable[[str], None], *, analysis: Analysis | None = None) -> Profile:
    """The start profile for `capture`, sized for the machine `shape`:
    synthesize's builder, in-process.

    It does what `threadwise synthesize CAPTURE --name NAME -o OUT --shape SHAPE` does (printed as
    that command) and keeps the TOML in `out` for the record, but hands back the typed profile
    it built, from `analysis` when the capture was analysed already. A failure keeps exit 1 and the
    `train step failed` of a failed command.
    """
    args = ["synthesize", str(capture), "--name", name, "-o", str(out), "--force", "--shape", shape.spec]
    progress(f"$ {shlex.join(['threadwise', *args])}")
    try:
        profile = synthesize_capture(capture, name, where=out, report=progress, shape=shape,
                                     analysis=analysis)
    except ThreadwiseError as error:
        raise _step_failed(args, error) from error
    write_output(out, dumps(profile), force=True)
    progress(f"wrote {out}: {len(profile.groups)} groups "
             f"({', '.join(f'{g.name}={g.treatment.value}' for g in profile.groups)})")
    return profile


def store_steps(con: duckdb.DuckDBPyConnection, result: RefineResult, runs: list[int], *,
                repeats: int, primary: str) -> None:
    """The loop's steps, with the ladder run that measured each (rejected and failed steps have
    none); `noise` is the run's own widest A/A floor of the primary at `repeats` pairs."""
    rows, measured_steps = [], iter(runs)
    for step in result.steps:
        run_id = next(measured_steps) if step.measured_run else None
        floors = judge.load_floors(con, run_id)
        widest = [f for level in floors.by_level.get(primary, {})
                  if (f := floors.floor(primary, repeats, level)) is not None]
        rows.append(StepRow(step=step.index, run_id=run_id, candidate=step.candidate,
                            description=step.description, decision=step.decision.value,
                            reason=step.reason, toml_diff=step.diff,
                            noise=max(widest) if widest else float("nan"),
                            # the verdicts need no seed: kept for old readers
                            decision_seed=json.dumps(None), floors_run=run_id,
                            chosen_because=step.chosen_because or None))
    store.insert(con, "step", rows)


class Outputs(NamedTuple):
    """Where a training's committed results go: the profile, and the record folder."""

    profile: Path   # profiles/NAME.toml
    record: Path    # artifacts/NAME/


class Searched(NamedTuple):
    """What the search found, with the ladder run of each measured step in step order."""

    result: RefineResult
    runs: list[int]


class Recorded(NamedTuple):
    """What the record's ladder file decided: where the profile goes, and the record's words on it."""

    chosen: outcome.Outcome
    verdict: str       # the profile header's sentence (report.verdict_sentence)
    head: list[str]    # REPORT.md's head: the verdict and the final table


def train(options: TrainOptions, progress: Callable[[str], None] = print,
          show: Callable[[str], None] | None = None) -> Path:
    """Run the whole pipeline; returns the written profile path. `show` is handed the record's
    result (REPORT.md's head: the verdict and the final table) once it is written, also when the
    answer is keep the default scheduler (KeepDefault is raised after)."""
    outputs = free_outputs(options)
    check_options(options)
    workload = load_workload(options.workload_path).with_window(options.window_s)
    training = Training(workload=workload, workload_toml=options.workload_path.read_text(),
                        place=options.place, levels=options.levels, repeats=options.repeats,
                        seed=options.seed, command=options.command, work=fresh_work(options.name, progress),
                        early_stop=options.early_stop, progress=progress)
    started = time.monotonic()
    start = observe_and_synthesize(options, training)
    choice = screen_start(start, options, training)
    searched = confirm(choice, options, training)
    return record(searched, options, training, outputs, started=started, show=show)


def free_outputs(options: TrainOptions) -> Outputs:
    """The training's outputs, refused if either exists already and --force was not given."""
    outputs = Outputs(options.profiles_dir / f"{options.name}.toml", options.artifacts_dir / options.name)
    for existing in outputs:
        if existing.exists() and not options.force:
            raise UsageError(f"{existing} exists", hint="pass --force to retrain and replace it")
    return outputs


def fresh_work(name: str, progress: Callable[[str], None]) -> Path:
    """build/train/NAME, new and empty. A failed or interrupted training keeps what it measured
    there, so the previous one moves to NAME.previous (only the one before is kept), never
    erased unseen."""
    work = Path("build") / "train" / name
    if work.exists():
        previous = work.with_name(f"{name}.previous")
        shutil.rmtree(previous, ignore_errors=True)
        work.rename(previous)
        progress(f"train: the last training's work directory is now {previous}")
    work.mkdir(parents=True)
    return work


def observe_and_synthesize(options: TrainOptions, training: Training) -> Profile:
    """The start profile: observed on this host and synthesized (train), or the one given
    (`threadwise refine`), renamed to the training's name."""
    progress = training.progress
    if options.start_profile is not None:
        progress(f"refine: starting from {options.start_profile}")
        start, _ = load_profile(options.start_profile)
        return start.model_copy(update={"name": options.name})
    capture, synthesized = training.work / "capture.duckdb", training.work / "synthesized.toml"
    progress(f"train 1/4 observe: {training.workload.name} for {options.observe_s:g} s on this host")
    observe_workload(training.workload, capture, options.observe_s, training.work, progress)
    progress("train 2/4 analyze + synthesize")
    analysis = analyze_once(capture, progress)
    # sized for the shape it is measured on (the lab's), so lint is clean there
    return synthesize_start(capture, options.name, options.place.shape, synthesized, progress,
                            analysis=analysis)


def screen_start(start: Profile, options: TrainOptions, training: Training) -> screening.ScreenChoice:
    """What step 0 confirms: the start, or the neighbour a screen of `--screen` candidates chose."""
    plan = screening.ScreenPlan(options.screen_width, screening.screen_levels(options.levels),
                                options.screen_repeats)
    return screening.screen_step(
        start, options.place.shape, plan, workload=training.workload, workload_toml=training.workload_toml,
        place=options.place, ladder_file=training.ladder_file, work=training.work, seed=options.seed,
        command=options.command, progress=training.progress)


def confirm(choice: screening.ScreenChoice, options: TrainOptions, training: Training) -> Searched:
    """The keep-only-wins loop from the chosen start, each step one ladder (search/step_ladders.py)."""
    progress = training.progress
    ladders = StepLadders(training)
    progress(f"train 3/4 refine: the start profile against the default scheduler, then up to "
             f"{options.budget} measured mutations (levels {options.levels}, {options.repeats} repeats, "
             + ("in the lab, TCG" if options.place.lab else "on this host") + ")")
    offered = _Skipping(options.candidates or loop.all_mutations, options.skip)
    result = loop.refine(choice.profile, shape=choice.shape, measure=ladders.measure,
                         primary=training.primary, secondary=training.secondary, budget=options.budget,
                         references=[choice.null] if options.null_arm else [], start_because=choice.because,
                         candidates=offered, blockers=ladders.last_ladder(load_blockers),
                         guide=ScreenAwareGuide(loop.order, choice.losses) if choice.losses else loop.order,
                         silences=ladders.last_ladder(load_silences),
                         on_step=lambda step: progress(step_line(step)))
    unmatched = [name for name in options.skip if name not in offered.skipped]
    if unmatched:
        progress("train: --skip named no candidate the search was offered: " + ", ".join(unmatched)
                 + " (names as the record's steps print them)")
    return Searched(result, ladders.runs)


def step_line(step: Step) -> str:
    """A decided step as train prints it the moment the loop decides it."""
    return (f"train: step {step.index} {step.candidate} (chosen because {step.chosen_because}): "
            f"{step.decision.value}: {step.reason}")


def record(searched: Searched, options: TrainOptions, training: Training, outputs: Outputs, *,
           started: float, show: Callable[[str], None] | None) -> Path:
    """The record (artifacts/NAME/) and the profile, from the ladder file; KeepDefault when no
    profile beat the default scheduler (the best candidate then stays in the record only)."""
    training.progress("train 4/4 record: the profile, REPORT.md, plots, data")
    staging = training.work / "record"
    staging.mkdir()
    con = store.open_ladder(training.ladder_file)
    try:
        recorded = write_record(con, searched, options, training, outputs=outputs, staging=staging,
                                started=started)
    finally:
        con.close()
    shutil.copy2(training.ladder_file, staging / "ladder.duckdb")
    publish(searched.result.best, recorded, options, work=training.work, outputs=outputs, staging=staging)
    took = f"{(time.monotonic() - started) / 60:.1f} min"
    if show is not None:
        show("\n".join(recorded.head))
    if not recorded.chosen.wins:
        raise KeepDefault(outcome.message(recorded.chosen),
                          hint=f"the record is in {outputs.record}/ (REPORT.md, KEEP-DEFAULT.md, "
                               f"ladder.duckdb), the best candidate in {recorded.chosen.path} for review, "
                               f"not to apply; no {outputs.profile} was written ({took})")
    training.progress(f"train: wrote {outputs.profile} and {outputs.record}/ in {took}")
    return outputs.profile


def write_record(con: duckdb.DuckDBPyConnection, searched: Searched, options: TrainOptions,
                 training: Training, *, outputs: Outputs, staging: Path, started: float) -> Recorded:
    """The steps and the training row into the ladder file, then REPORT.md and plots in `staging`."""
    store_steps(con, searched.result, searched.runs, repeats=options.repeats,
                primary=training.workload.objective.primary.metric)
    # a profile goes to the profiles folder only if it beat the default scheduler (outcome.py)
    chosen = outcome.decide(con, outputs.profile, outputs.record, options.name)
    store.insert(con, "training", [TrainingRow(
        name=options.name, workload=training.workload.name, command=options.command,
        profile_path=str(chosen.path), wall_s=time.monotonic() - started,
        limitations=json.dumps(limitations(options, training.workload)))])
    con.execute("CHECKPOINT")
    recorded = Recorded(chosen, report.verdict_sentence(con), report.result_lines(con))
    report.write_report(con, staging, head=recorded.head)
    return recorded


def publish(best: Profile, recorded: Recorded, options: TrainOptions, *, work: Path, outputs: Outputs,
            staging: Path) -> None:
    """Move the staged record into place and write the profile (or the kept candidate) beside it."""
    header = outcome.profile_header(options.command, outputs.record, recorded.verdict)
    options.profiles_dir.mkdir(parents=True, exist_ok=True)
    options.artifacts_dir.mkdir(parents=True, exist_ok=True)
    if outputs.record.exists():
        shutil.rmtree(outputs.record)
    staging.rename(outputs.record)
    written_in = options.start_profile.parent if options.start_profile is not None else work
    relative = _capture_relative_to(best, written_in, recorded.chosen.path.parent)
    outcome.write(recorded.chosen, header, toml_text(relative), outputs.profile)


def _capture_relative_to(profile: Profile, written_in: Path, folder: Path) -> Profile:
    """The profile with its [source] capture path (relative to `written_in`, the folder of the
    file it was read from) made relative to `folder`, where the trained profile goes."""
    if profile.source is None or Path(profile.source.capture).is_absolute():
        return profile
    where = os.path.relpath((written_in / profile.source.capture).resolve(), folder.resolve())
    return profile.model_copy(update={"source": profile.source.model_copy(
        update={"capture": Path(where).as_posix()})})


def check_options(options: TrainOptions) -> None:
    """Refuse, before anything runs, options no training can succeed with."""
    if options.repeats < stats.MIN_PAIRS:
        raise UsageError(f"--repeats {options.repeats}: a verdict needs at least {stats.MIN_PAIRS} repeats "
                         "(pairs of baseline and profile cells)", hint="e.g. --repeats 3 (docs/refine.md)")
    if not options.levels:
        raise UsageError("--levels names no background level", hint="e.g. --levels 0,1,2,4")
    if options.budget < 0:
        raise UsageError(f"--budget {options.budget}: the number of mutations to measure is 0 or more")
    if options.window_s is not None and options.window_s <= 0:
        raise UsageError(f"--window {options.window_s:g}: a window is some seconds long",
                         hint="e.g. --window 5")


class _Skipping:
    """A candidate source without the named candidates; remembers which names it left out."""

    def __init__(self, source: loop.Candidates, names: tuple[str, ...]) -> None:
        self.source, self.names, self.skipped = source, frozenset(names), set[str]()

    def __call__(self, profile: Profile, shape: Shape) -> list[Candidate]:
        offered = []
        for candidate in self.source(profile, shape):
            if candidate.name in self.names:
                self.skipped.add(candidate.name)
            else:
                offered.append(candidate)
        return offered


def limitations(options: TrainOptions, workload: Workload) -> list[str]:
    items = []
    if options.place.lab:
        items.append(f"Measured under TCG (software emulation) in a {options.place.cpus}-vCPU lab VM on a "
                     "2-core host: relative effects between arms are real (docs/lab.md), absolute rates are "
                     "not "
                     "those of real hardware. Shapes with SMT or more cores were not measured here; run the "
                     "same ladder on a real sched_ext host (or the self-contained lab on a bigger machine).")
    items.append(f"{options.repeats} repeats per arm and level: only effects larger than the spread of "
                 "identical arms are called better or worse; smaller effects read as within noise.")
    items.append(f"Levels {options.levels}; windows of {workload.objective.window_s:g} s after "
                 f"{workload.objective.warmup_s:g} s warm-up.")
    if options.budget == 0:
        items.append("No mutations were measured (budget 0): the profile is the synthesized one.")
    if workload.service is None and workload.load.source == "command":
        items.append("The load command is the target, so each profile cell checked its threads' layers "
                     "inside the window (a /proc scan and a bpftool dump); baseline cells carry no such "
                     "probe (docs/lab.md).")
    if options.skip:
        items.append("Not measured on request (--skip; a previous record measured them): "
                     + ", ".join(f"`{name}`" for name in options.skip) + ".")
    return items
