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
from threadwise.options import Cpus, Force, HostPriority, Output, ShapeSpec, Switch, with_options
from threadwise.refine.canary import DEFAULT_MARGIN
from threadwise.refine.cli_options import (
    SPEC_HELP,
    Guest,
    Lab,
    Levels,
    Repeats,
    SearchFlags,
    Seed,
    Window,
    WorkloadSpec,
    parse_levels,
    search_options,
)
from threadwise.runtime.scx import sched_ext_state

if TYPE_CHECKING:
    from threadwise.refine.measure.ladder import Arm
    from threadwise.refine.measure.preflight import Checked
    from threadwise.refine.measure.run import LadderRun
    from threadwise.refine.measure.workload import Workload
    from threadwise.shape import Shape

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
    guest: Guest = "initramfs",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Also print what train would run: the "
                                          "commands, the guest, what it carries. Nothing is started.")]
    = False,
) -> None:
    """Validate a workload file, check it can run where train runs it (in the --guest given), and
    summarise it.

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
                                        "of every 100 ms.")] = False,
    aa: Annotated[bool, typer.Option("--aa/--no-aa", help="Also measure the baseline against itself, "
                                     "interleaved: each level's noise, which every verdict of the run "
                                     "pools.")] = True,
    lab: Lab = False,
    cpus: Cpus = 2,
    guest: Guest = "initramfs",
    host_priority: HostPriority = Switch.on,
    output: Output = Path("ladder.duckdb"),
    keep_raw: Annotated[Path | None, typer.Option("--keep-raw", help="Keep the agent's raw files here.")]
    = None,
) -> None:
    """Measure arms (the default scheduler and profiles) at background levels, back to back.

    Every cell lands in the ladder file (-o; a run is added to what it holds) with its validity
    (spinners ran, generator not saturated, service alive, scheduler attached, threads in their
    layers); per level the paired ratio against the baseline with its 95% interval and a verdict
    are printed and stored. Each profile arm is vetted as a search's candidates are (validated,
    compiled for where the cells run, checked by scx_layered, linted). The run also measures the
    baseline against itself (--aa, on by default), interleaved, and each verdict pools that
    level's A/A pairs with its own; --no-aa saves that arm, and its verdicts rest on their own
    pairs alone (docs/refine.md).

      threadwise ladder redis --arm profiles/redis.toml --lab --levels 0,2,4 --repeats 3
    """
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.run import SPIKY_BACKGROUND, run_ladder, where
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
    arms = _arms(profiles, aa, place.shape)
    result = run_ladder(spec.with_window(window), text, arms, ladder_file=output, place=place,
                        levels=levels_list, repeats=repeats, order=order, seed=seed,
                        purpose="aa" if aa and not profiles else "ladder",
                        command=shlex.join(["threadwise", *sys.argv[1:]]), keep_raw=keep_raw,
                        background=SPIKY_BACKGROUND if spiky else "",
                        progress=lambda line: typer.echo(line, err=True))
    _show_ladder(output, result, repeats)


def _arms(profiles: list[str], aa: bool, shape: Shape) -> list[Arm]:
    """The ladder's arms: the baseline, its A/A twin (`aa`), and each `--arm` profile (FILE or
    NAME=FILE) compiled for `shape`."""
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.ladder import BASELINE, Arm
    from threadwise.refine.measure.run import arm_from_file

    arms = [Arm(BASELINE), *([Arm("baseline-aa")] if aa else [])]
    for item in profiles:
        name, _, file = item.rpartition("=")
        arms.append(arm_from_file(Path(file), shape, name or None))
    if len(arms) < 2:
        raise UsageError("nothing to compare", hint="add --arm PROFILE.toml, or --aa for the noise floors")
    return arms


def _show_ladder(output: Path, result: LadderRun, repeats: int) -> None:
    """Per level the stored comparisons, then how many cells were valid."""
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine import report

    typer.echo("\n".join(report.ladder_lines(output, result.run_id, repeats, result.comparisons)))
    ingested = result.ingested
    typer.echo(f"{ingested.valid} of {ingested.cells} cells valid"
               + ("" if ingested.completed else f"; {ingested.stopped_reason}"))


@with_options(search_options)
def train_command(
    *,
    name: Annotated[str, typer.Option("--name", "-n", help="Profile name: writes profiles/NAME.toml "
                                      "and artifacts/NAME/.")],
    observe_s: Annotated[float, typer.Option("--observe", help="Seconds to observe the workload.")] = 8.0,
    flags: SearchFlags,
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
    _search(flags, name, observe_s=observe_s)


@with_options(search_options)
def refine_command(
    *,
    profile: Annotated[Path, typer.Argument(help="The profile to refine (.toml).", show_default=False)],
    name: Annotated[str | None, typer.Option("--name", "-n", help="Name of the refined profile "
                                             "(default: the profile's).")] = None,
    flags: SearchFlags,
) -> None:
    """Refine a profile: screen its neighbourhood, confirm the best, keep only measured wins.

    Screens the profile and up to --screen of its mutations (treatment, sizing, slices, preempt,
    merge/join/split, reserve: each validated, compiled, checked by scx_layered and linted) side
    by side in one lab boot, confirms the best against the kernel's default scheduler (and that
    scheduler against itself, interleaved: the noise), then measures up to --budget guided
    mutations against the current best; every step is recorded with its TOML diff.

      threadwise refine profiles/redis.toml --workload redis --lab --budget 3
    """
    _search(flags, name, start=profile)


def _search(flags: SearchFlags, name: str | None, *, start: Path | None = None,
            observe_s: float = 8.0) -> None:
    """train (from an observation) or refine (from the profile `start`): the options checked in the
    order a user's mistakes are reported, before the host's limits; then the search, and what next."""
    # deferred: loads duckdb, numpy, pyarrow and pydantic; `threadwise --help` imports this module
    from threadwise.refine.measure.run import where
    from threadwise.refine.train import TrainOptions, train
    from threadwise.synthesize.api import check_name, load_profile

    if name is not None:
        check_name(name)
    path, _spec, _text = _workload(flags.workload)
    started = load_profile(start)[0] if start is not None else None
    name = name or (started.name if started is not None else "")
    levels = parse_levels(flags.levels)
    _refuse_existing(flags.profiles, flags.artifacts, name, flags.force)
    place = where(flags.lab, flags.cpus, flags.guest, host_priority=flags.host_priority == "on")
    _checked(flags.workload, place.guest if place.lab else None)   # what it would fail on later, now
    options = TrainOptions(path, name, place, levels, flags.repeats, flags.budget, seed=flags.seed,
                           observe_s=observe_s, window_s=flags.window, profiles_dir=flags.profiles,
                           artifacts_dir=flags.artifacts, force=flags.force,
                           command=shlex.join(["threadwise", *sys.argv[1:]]), start_profile=start,
                           skip=flags.skip, early_stop=flags.early_stop, screen_width=flags.screen,
                           screen_repeats=flags.screen_repeats, null_arm=flags.null_arm)
    written = train(options, progress=lambda line: typer.echo(line, err=True), show=typer.echo)
    typer.echo(next_line(written, options.artifacts_dir / name / "REPORT.md", path))


def _refuse_existing(profiles: Path, artifacts: Path, name: str, force: bool) -> None:
    """Refuse before any work when the profile or its record exists and --force was not given."""
    for existing in (profiles / f"{name}.toml", artifacts / name):
        if existing.exists() and not force:
            raise UsageError(f"{existing} already exists; not replaced",
                             hint="pass --force to retrain and replace it, or choose another --name")


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
            f"the lab VM: {lab_apply_line(written)}, "
            f"or measure it again there: threadwise ladder {spec} --arm {written} --lab")


def lab_apply_line(profile: Path) -> str:
    """`threadwise lab run -- threadwise apply PROFILE`, with the set-up step it needs first where this
    machine lacks the vng lab (`make demo` sets up the self-contained guest only, not vng)."""
    # deferred: the lab's modules, which `threadwise --help` does without
    from threadwise.errors import MissingTool
    from threadwise.runtime.lab.vng import find_vng

    command = f"threadwise lab run -- threadwise apply {profile} --duration 30"
    try:
        find_vng()
    except MissingTool:
        return f"scripts/setup-lab.sh (the vng lab, once), then {command}"
    return command


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
    workload: WorkloadSpec,
    pid: Annotated[int | None, typer.Option("--pid", help="The service's pid (default: the one process "
                                            "named as the workload's target).")] = None,
    probe_log: Annotated[Path | None, typer.Option("--probe-log", help="Read each window's metrics from "
                                                   "the lines the service appends to this log.")] = None,
    probe_command: Annotated[str | None, typer.Option("--probe-command", help="Or from the output of this "
                                                      "command, run once per window ({window_s}: its "
                                                      "length).")] = None,
    shape: ShapeSpec = "host",
    margin: Annotated[list[str] | None, typer.Option("--margin", help="The loss a metric tolerates before "
                                                     "the canary calls it worse: 10% for every metric, or "
                                                     "METRIC=25% for one (repeatable). Default "
                                                     f"{DEFAULT_MARGIN:.0%}.")] = None,
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
                                                   "of an arm (ABBA over visits).")] = 1,
    attach_timeout: Annotated[str, typer.Option("--attach-timeout", help="How long each attach of "
                                                "scx_layered may take.")] = "120s",
    out: Output = Path("canary.duckdb"),
    force: Force = False,
) -> None:
    """Judge a profile on the live service it was trained for, on this host; keep it only while it
    measurably helps.

    Windows alternate, in ABBA blocks, between the profile (scx_layered, compiled for --shape) and
    the kernel's default scheduler, and after every pair an anytime-valid confidence sequence per
    metric decides: worse beyond --margin rolls back (exit 13), better with no metric worse beyond
    its margin keeps the profile applied (exit 0), no decision by --max-duration rolls back ("no
    measurable benefit", exit 13). Ctrl-C and SIGTERM roll back first. --workload is the one the
    profile was trained with: its target process, objective and parser. Every window goes to the
    canary's record (-o). Needs root and a kernel with sched_ext; half the windows run on the
    default scheduler (docs/canary.md).

      threadwise canary profiles/redis.toml --workload redis --probe-command 'redis-benchmark -t get --csv'
    """
    # deferred: loads duckdb, numpy and pydantic; `threadwise --help` imports this module
    from threadwise.durations import optional_duration, parse_duration
    from threadwise.refine.canary.command import CanaryOptions, canary
    from threadwise.shape import parse_shape

    regression = _percent(max_regression, "--max-regression") if max_regression else None
    every, own = _margins(margin or [])
    options = CanaryOptions(
        profile=profile, workload=workload, pid=pid, probe_log=probe_log,
        probe_command=shlex.split(probe_command) if probe_command else None, shape=parse_shape(shape),
        margin=every, margins=own, max_regression=regression,
        max_duration_s=parse_duration(max_duration, option="--max-duration"),
        window_s=optional_duration(window, option="--window"),
        warmup_s=optional_duration(warmup, option="--warmup"), alpha=alpha,
        windows_per_visit=windows_per_visit,
        attach_timeout_s=parse_duration(attach_timeout, option="--attach-timeout"),
        out=out, force=force, command=shlex.join(["threadwise", *sys.argv[1:]]))
    result = canary(options, progress=typer.echo)
    typer.echo(f"canary: kept after {result.pairs} pairs ({result.seconds:.0f} s); record {out}")


def _margins(given: list[str]) -> tuple[float, dict[str, float]]:
    """--margin as the margin of every metric (the last bare one, else the default) and each
    metric's own (METRIC=PCT)."""
    every, own = DEFAULT_MARGIN, {}
    for item in given:
        name, _, value = item.rpartition("=")
        if name:
            own[name] = _percent(value, "--margin")
        else:
            every = _percent(value, "--margin")
    return every, own


def register(app: typer.Typer) -> None:
    app.command("rejudge")(rejudge_command)
    app.command("canary")(canary_command)
    app.add_typer(workload_app, name="workload")
    app.command("ladder")(ladder_command)
    app.command("train")(train_command)
    app.command("refine")(refine_command)
