"""CLI commands of the refine stage: `workload check|list|show`, `ladder`, `train`.

Each command parses options and calls the library (`workload.py`, `run.py`,
`train.py`); errors are ThreadwiseErrors that threadwise/cli.py reports.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from threadwise.errors import UsageError
from threadwise.refine.canary import DEFAULT_MARGIN
from threadwise.refine.cli_options import (
    SCREEN_WIDTH,
    SEARCH_REPEATS,
    SPEC_HELP,
    Artifacts,
    Budget,
    Cpus,
    EarlyStop,
    Force,
    Guest,
    HostPriority,
    Lab,
    Levels,
    NullArm,
    Profiles,
    Repeats,
    ScreenRepeats,
    ScreenWidth,
    SearchRepeats,
    Seed,
    Skip,
    Switch,
    Window,
    parse_levels,
)
from threadwise.runtime.scx import sched_ext_state

if TYPE_CHECKING:
    from threadwise.refine.measure.preflight import Checked
    from threadwise.refine.measure.workload import Workload
    from threadwise.refine.train import TrainOptions

workload_app = typer.Typer(
    help=(
        "Workload files: what a ladder runs, loads and measures (docs/workload.md).\n\n"
        "  threadwise workload list                   # the bundled ones\n\n"
        "  threadwise workload check my-service.toml  # validate one, print what it does"
    ),
    no_args_is_help=True,
)

@workload_app.command("check")
def check_command(
    workload: Annotated[str, typer.Argument(help=SPEC_HELP, show_default=False)],
    guest: Annotated[str, typer.Option("--guest", help="The lab guest to check for, as `train --lab "
                                       "--guest` would use it: initramfs (the default) or vng.")]
    = "initramfs",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Also print what train would run: the "
                                          "commands, the guest, what it carries. Nothing is started.")]
    = False,
) -> None:
    """Validate a workload file, check it can run where train runs it, and summarise it.

    Refuses, with the file, line and what to do, what a training would fail on later: a program
    that is missing or not executable, a relative path (commands run in the ladder's own
    directory), a program the lab guest cannot carry (an interpreter with a library tree) or
    would hide (anything under /tmp in the initramfs guest).

      threadwise workload check my-service.toml --dry-run
    """
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.preflight import dry_run_lines
    from threadwise.refine.measure.run import GUESTS

    if guest not in GUESTS:
        raise UsageError(f"unknown --guest {guest!r}", hint=f"one of {', '.join(GUESTS)}")
    path, spec, checked = _checked(workload, guest)
    typer.echo(f"{path}: ok")
    for line in spec.summary():
        typer.echo(f"  {line}")
    carried = f"; the {guest} guest carries them" if guest == "initramfs" else ""
    typer.echo(f"  checked:   every program exists and is executable{carried}")
    if dry_run:
        typer.echo("\n".join(dry_run_lines(spec, checked)))


def _checked(workload: str, guest: str | None) -> tuple[Path, Workload, Checked]:
    """The workload file read and checked for where train runs it (`guest`; None: this host)."""
    # deferred: loads pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.preflight import preflight

    path, spec, text = _workload(workload)
    return path, spec, preflight(spec, text, str(path), guest=guest)


@workload_app.command("list")
def list_command() -> None:
    """List the bundled workloads with their descriptions."""
    # deferred: loads pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.workload import bundled_names, bundled_workload_path, load_workload

    for name in bundled_names():
        typer.echo(f"{name:12s} {load_workload(bundled_workload_path(name)).description}")


@workload_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="A bundled workload's name.", show_default=False)],
) -> None:
    """Print a bundled workload file (a starting point for your own)."""
    # deferred: loads pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.workload import bundled_workload_path

    typer.echo(bundled_workload_path(name).read_text(encoding="utf-8"), nl=False)


def _workload(spec: str) -> tuple[Path, Workload, str]:
    # deferred: loads pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.workload import load_workload, resolve_workload

    path = resolve_workload(spec)
    return path, load_workload(path), path.read_text()


def ladder_command(
    workload: Annotated[str, typer.Argument(help=SPEC_HELP)],
    arm: Annotated[list[str], typer.Option("--arm", help="`baseline`, a profile .toml, or NAME=PROFILE.toml "
                                           "(repeatable; baseline is always measured).")] = [],  # noqa: B006
    levels: Levels = "0,1,2,4,8",
    repeats: Repeats = 3,
    window: Window = None,
    order: Annotated[str, typer.Option("--order", help="rotate (each repeat starts one arm later, so "
                                       "each arm takes each position equally often; ABBA for two "
                                       "arms), abba (reversed every repeat) or shuffle.")] = "rotate",
    seed: Seed = 1,
    spiky: Annotated[bool, typer.Option("--spiky", help="Duty-cycled background: each spinner busy 50% "
                                        "of every 100 ms (the noisy neighbour's pattern).")] = False,
    aa: Annotated[bool, typer.Option("--aa/--no-aa", help="A/A: measure the baseline against itself "
                                     "too, interleaved: each level's noise every verdict of this run "
                                     "pools (on by default; without it a verdict rests on its own "
                                     "pairs' spread alone, far wider at 3 repeats: docs/refine.md).")] = True,
    lab: Lab = False,
    cpus: Cpus = 2,
    guest: Guest = "initramfs",
    host_priority: HostPriority = Switch.on,
    output: Annotated[Path, typer.Option("--output", "-o", help="The ladder file (DuckDB; runs are added).")]
    = Path("ladder.duckdb"),
    keep_raw: Annotated[Path | None, typer.Option("--keep-raw", help="Keep the agent's raw files here.")]
    = None,
) -> None:
    """Measure arms (the default scheduler and profiles) at background levels, back to back.

    Every cell lands in the ladder file with its validity (spinners ran, generator not saturated,
    service alive, scheduler attached, threads in their layers); per level the paired ratio
    against the baseline with its 95% interval and a verdict are printed and stored. The run
    also measures the baseline against itself (--aa, on by default), interleaved, and each
    verdict pools that level's A/A pairs with its own; --no-aa saves that arm, and its
    verdicts rest on their own pairs alone.

      threadwise ladder redis --arm profiles/redis.toml --lab --levels 0,2,4 --repeats 3
    """
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine import report
    from threadwise.refine.measure.ladder import BASELINE, Arm
    from threadwise.refine.measure.run import SPIKY_BACKGROUND, arm_from_file, run_ladder, where
    from threadwise.refine.measure.store import check_output
    from threadwise.synthesize.api import load_profile

    profiles = [item for item in arm if item != "baseline"]
    _path, spec, text = _workload(workload)   # bad input is reported before the host's limits
    check_output(output)
    for item in profiles:
        load_profile(Path(item.rpartition("=")[2]))
    levels_list = parse_levels(levels)
    place = where(lab, cpus, guest, profiles=bool(profiles), host_priority=host_priority == "on")
    _checked(workload, place.guest if place.lab else None)   # what it would fail on later, now
    spec = spec.with_window(window)
    arms = [Arm(BASELINE)]
    if aa:
        arms.append(Arm("baseline-aa"))
    for item in profiles:
        name, _, file = item.rpartition("=")
        arms.append(arm_from_file(Path(file), place.shape, name or None))
    if len(arms) < 2:
        raise UsageError("nothing to compare", hint="add --arm PROFILE.toml, or --aa for the noise floors")
    result = run_ladder(spec, text, arms, ladder_file=output, place=place, levels=levels_list,
                        repeats=repeats, order=order, seed=seed,
                        purpose="aa" if aa and not profiles else "ladder",
                        command=shlex.join(["threadwise", *sys.argv[1:]]), keep_raw=keep_raw,
                        background=SPIKY_BACKGROUND if spiky else "",
                        progress=lambda line: typer.echo(line, err=True))
    typer.echo("\n".join(report.ladder_lines(output, result.run_id, repeats, result.comparisons)))
    ingested = result.ingested
    typer.echo(f"{ingested.valid} of {ingested.cells} cells valid"
               + ("" if ingested.completed else f"; {ingested.stopped_reason}"))


def train_command(
    workload: Annotated[str, typer.Option("--workload", "-w", help="A workload file or a bundled name.")],
    name: Annotated[str, typer.Option("--name", "-n", help="Profile name: writes profiles/NAME.toml "
                                      "and artifacts/NAME/.")],
    lab: Lab = False,
    cpus: Cpus = 2,
    guest: Guest = "initramfs",
    host_priority: HostPriority = Switch.on,
    levels: Levels = "0,1,2,4",
    repeats: SearchRepeats = SEARCH_REPEATS,
    screen: ScreenWidth = SCREEN_WIDTH,
    screen_repeats: ScreenRepeats = 1,
    null_arm: NullArm = True,
    budget: Budget = 0,
    window: Window = None,
    observe_s: Annotated[float, typer.Option("--observe", help="Seconds to observe the workload.")] = 8.0,
    seed: Seed = 1,
    profiles: Profiles = Path("profiles"),
    artifacts: Artifacts = Path("artifacts"),
    force: Force = False,
    skip: Skip = None,
    early_stop: EarlyStop = True,
) -> None:
    """Train a profile: observe, analyze, synthesize, screen, then confirm against the default.

    The synthesized profile and up to --screen candidates of its neighbourhood are measured side
    by side in one lab boot; the best of them is then confirmed against the kernel's default
    scheduler in a background-load ladder at --repeats (with the default scheduler against
    itself, the noise, and scx_layered with every thread in its catch-all, the null arm). Up to
    --budget guided mutations follow, each kept only if it wins. Only a profile that beats the
    default scheduler is written to profiles/NAME.toml; the record goes to artifacts/NAME/.

      threadwise train --workload rolesim --name rolesim --lab
    """
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.run import where
    from threadwise.refine.train import TrainOptions
    from threadwise.synthesize.api import check_name

    check_name(name)
    path, _spec, _text = _workload(workload)
    levels_list = parse_levels(levels)
    _refuse_existing(profiles, artifacts, name, force)
    place = where(lab, cpus, guest, host_priority=host_priority == "on")
    _checked(workload, place.guest if place.lab else None)   # what it would fail on later, now
    options = TrainOptions(path, name, place, levels_list, repeats, budget, seed=seed,
                           observe_s=observe_s, window_s=window, profiles_dir=profiles,
                           artifacts_dir=artifacts, force=force,
                           command=shlex.join(["threadwise", *sys.argv[1:]]), skip=tuple(skip or ()),
                           early_stop=early_stop, screen_width=screen, screen_repeats=screen_repeats,
                           null_arm=null_arm)
    _train_and_show(options)


def refine_command(
    profile: Annotated[Path, typer.Argument(help="The profile to refine (.toml).", show_default=False)],
    workload: Annotated[str, typer.Option("--workload", "-w", help="A workload file or a bundled name.")],
    name: Annotated[str | None, typer.Option("--name", "-n", help="Name of the refined profile "
                                             "(default: the profile's).")] = None,
    lab: Lab = False,
    cpus: Cpus = 2,
    guest: Guest = "initramfs",
    host_priority: HostPriority = Switch.on,
    levels: Levels = "0,1,2,4",
    repeats: SearchRepeats = SEARCH_REPEATS,
    screen: ScreenWidth = SCREEN_WIDTH,
    screen_repeats: ScreenRepeats = 1,
    null_arm: NullArm = True,
    budget: Budget = 0,
    window: Window = None,
    seed: Seed = 1,
    profiles: Profiles = Path("profiles"),
    artifacts: Artifacts = Path("artifacts"),
    force: Force = False,
    skip: Skip = None,
    early_stop: EarlyStop = True,
) -> None:
    """Refine a profile: screen its neighbourhood, confirm the best, keep only measured wins.

    Screens the profile and up to --screen of its mutations (treatment, sizing, slices, preempt,
    merge/join/split, reserve: each validated, compiled, checked by scx_layered and linted) side
    by side in one lab boot, confirms the best against the kernel's default scheduler (and that
    scheduler against itself, interleaved: the noise), then measures up to --budget guided
    mutations against the current best; every step is recorded with its TOML diff.

      threadwise refine profiles/redis.toml --workload redis --lab --budget 3
    """
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.run import where
    from threadwise.refine.train import TrainOptions
    from threadwise.synthesize.api import check_name, load_profile

    if name is not None:
        check_name(name)
    path, _spec, _text = _workload(workload)
    start, _ = load_profile(profile)
    levels_list = parse_levels(levels)
    _refuse_existing(profiles, artifacts, name or start.name, force)
    place = where(lab, cpus, guest, host_priority=host_priority == "on")
    _checked(workload, place.guest if place.lab else None)   # what it would fail on later, now
    options = TrainOptions(path, name or start.name, place, levels_list, repeats, budget,
                           seed=seed, window_s=window, profiles_dir=profiles, artifacts_dir=artifacts,
                           force=force, command=shlex.join(["threadwise", *sys.argv[1:]]),
                           start_profile=profile, skip=tuple(skip or ()), early_stop=early_stop,
                           screen_width=screen, screen_repeats=screen_repeats,
                           null_arm=null_arm)
    _train_and_show(options)


def _refuse_existing(profiles: Path, artifacts: Path, name: str, force: bool) -> None:
    """Refuse before any work when the profile or its record exists and --force was not given."""
    for existing in (profiles / f"{name}.toml", artifacts / name):
        if existing.exists() and not force:
            raise UsageError(f"{existing} already exists; not replaced",
                             hint="pass --force to retrain and replace it, or choose another --name")


def _train_and_show(options: TrainOptions) -> None:
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.train import train

    written = train(options, progress=lambda line: typer.echo(line, err=True), show=typer.echo)
    report = options.artifacts_dir / options.name / "REPORT.md"
    typer.echo(next_line(written, report, options.workload_path))


def next_line(written: Path, report: Path, workload: Path, *, sched_ext: bool | None = None) -> str:
    """train's closing suggestion: what works on THIS host (`apply` needs sched_ext, else the lab)."""
    # deferred: loads pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.workload import bundled_names, bundled_workload_path

    if sched_ext is None:
        sched_ext = sched_ext_state().supported
    if sched_ext:
        return f"next: review {written} and {report}; apply it with: threadwise apply {written}"
    bundled = workload.stem in bundled_names() and bundled_workload_path(workload.stem) == workload
    spec = workload.stem if bundled else str(workload)
    return (f"next: review {written} and {report}; this kernel has no sched_ext, so try the profile in "
            f"the lab VM: threadwise lab run -- threadwise apply {written} --duration 30, "
            f"or measure it again there: threadwise ladder {spec} --arm {written} --lab")


def rejudge_command(
    record: Annotated[Path, typer.Argument(help="A training record (artifacts/NAME/, with ladder.duckdb and "
                                           "REPORT.md) or a ladder file.")],
    profile: Annotated[Path | None, typer.Option("--profile", help="The trained profile whose header "
                                                 "states the verdict (default: the record's own).")] = None,
) -> None:
    """Judge a stored ladder again with the current judge, and rewrite what shows its verdicts.

    Floors from the A/A runs, every comparison, every refine step's keep decision, then (for a
    record) REPORT.md, its plots and the profile's header, all from the file's measurements.

      threadwise rejudge artifacts/rolesim
    """
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.rejudge import rejudge_record

    for line in rejudge_record(record, profile):
        typer.echo(line)


def _percent(text: str, option: str) -> float:
    """`10%` or `0.10`: a ratio."""
    try:
        value = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise UsageError(f"{option} {text!r} is not a percentage", hint=f"for example {option} 10%") from None
    if not 0 <= value < 1:
        raise UsageError(f"{option} {text!r} is out of range", hint="between 0% and 100%")
    return value


def canary_command(
    profile: Annotated[Path, typer.Argument(help="The trained profile (.toml) to judge.",
                                            show_default=False)],
    workload: Annotated[str, typer.Option("--workload", help="The workload file the profile was trained "
                                          "with: its target process, objective and parser.",
                                          show_default=False)],
    pid: Annotated[int | None, typer.Option("--pid", help="The service's pid (default: the one process "
                                            "named as the workload's target).")] = None,
    probe_log: Annotated[Path | None, typer.Option("--probe-log", help="Read each window's metrics from "
                                                   "the lines the service appends to this log.")] = None,
    probe_command: Annotated[str | None, typer.Option("--probe-command", help="Or from the output of this "
                                                      "command, run once per window ({window_s}: its "
                                                      "length).")] = None,
    shape: Annotated[str, typer.Option("--shape", help="Machine shape the profile is compiled for "
                                       "(host: this machine).")] = "host",
    margin: Annotated[list[str] | None, typer.Option("--margin", help="The loss a metric tolerates before "
                                                     "the canary calls it worse: 10% for every metric, or "
                                                     "METRIC=25% for one (repeatable). Default "
                                                     f"{DEFAULT_MARGIN:.0%}, measured (docs/canary.md)."
                                                     )] = None,
    max_regression: Annotated[str | None, typer.Option("--max-regression", help="One profile window "
                                                       "this much worse on the primary than the default "
                                                       "window before it rolls back at once.")] = None,
    max_duration: Annotated[str, typer.Option("--max-duration", help="Roll back when no decision came "
                                              "by then (30m, 2h, ...).")] = "30m",
    window: Annotated[str | None, typer.Option("--window", help="Window length (default: the workload "
                                               "file's).")] = None,
    warmup: Annotated[str | None, typer.Option("--warmup", help="After each switch, before a window "
                                               "counts (default: the workload file's).")] = None,
    alpha: Annotated[float, typer.Option("--alpha", help="The chance of any false decision over the "
                                         "whole canary, however often it looks.")] = 0.05,
    windows_per_visit: Annotated[int, typer.Option("--windows-per-visit", min=1, help="Windows per visit "
                                                   "of an arm (ABBA over visits): more where an attach "
                                                   "costs far more than a window (the lab).")] = 1,
    attach_timeout: Annotated[str, typer.Option("--attach-timeout", help="How long each attach of "
                                                "scx_layered may take (TCG: 30 s and more).")] = "120s",
    out: Annotated[Path, typer.Option("--output", "-o", help="The canary's record (DuckDB).")]
    = Path("canary.duckdb"),
    force: Force = False,
) -> None:
    """Judge a profile on the live service it was trained for, on this host; keep it only while it
    measurably helps.

    Windows alternate, in ABBA blocks, between the profile (scx_layered) and the kernel's default
    scheduler, and after every pair an anytime-valid confidence sequence per metric decides: worse
    beyond --margin rolls back (exit 13), better with no metric worse beyond its margin keeps the
    profile applied (exit 0), no decision by --max-duration rolls back ("no measurable benefit",
    exit 13). Ctrl-C and SIGTERM roll back first. Needs root and a kernel with sched_ext; half the
    windows run on the default scheduler (docs/canary.md).

      threadwise canary profiles/redis.toml --workload redis --probe-command 'redis-benchmark -t get --csv'
    """
    # deferred: loads duckdb, numpy and pydantic; `threadwise --help` imports this module
    from threadwise.durations import optional_duration, parse_duration
    from threadwise.refine.canary.command import CanaryOptions, canary

    regression = _percent(max_regression, "--max-regression") if max_regression else None
    every, own = DEFAULT_MARGIN, {}
    for given in margin or []:
        name, _, value = given.rpartition("=")
        if name:
            own[name] = _percent(value, "--margin")
        else:
            every = _percent(value, "--margin")
    options = CanaryOptions(
        profile, workload, pid, probe_log, shlex.split(probe_command) if probe_command else None, shape,
        every, regression,
        parse_duration(max_duration, option="--max-duration"), optional_duration(window, option="--window"),
        optional_duration(warmup, option="--warmup"), alpha, out, force,
        shlex.join(["threadwise", *sys.argv[1:]]), windows_per_visit,
        parse_duration(attach_timeout, option="--attach-timeout"), own)
    result = canary(options, progress=typer.echo)
    typer.echo(f"canary: kept after {result.pairs} pairs ({result.seconds:.0f} s); record {out}")


def register(app: typer.Typer) -> None:
    app.command("rejudge")(rejudge_command)
    app.command("canary")(canary_command)
    app.add_typer(workload_app, name="workload")
    app.command("ladder")(ladder_command)
    app.command("train")(train_command)
    app.command("refine")(refine_command)
