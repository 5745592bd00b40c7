"""CLI commands of the synthesize stage: `synthesize`, `validate`, `compile`, `lint`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from threadwise.errors import (
    ConfigRefused,
    FindingsReported,
    InputError,
    UsageError,
)
from threadwise.options import (
    DEFAULT_HOST_QUANTILE,
    EngineOption,
    FleetEngine,
    Force,
    HostQuantile,
    Json,
    MaybeOutput,
    MaybeShapeSpec,
    ShapeSpec,
    SparkMaster,
    names_a_fleet,
)
from threadwise.paths import check_new_output, write_output
from threadwise.scx import SCX_LAYERED_VERSION
from threadwise.words import plain

if TYPE_CHECKING:
    from threadwise.synthesize.provenance import RecordCheck, RecordNote

def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _requests(items: list[str] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items or []:
        pattern, _, value = item.rpartition("=")
        value = value.removesuffix("m")
        if not pattern or not value.isdigit():
            raise UsageError(f"bad --request {item!r}", hint="use PATTERN=MILLICORES, e.g. hot-*=2250")
        out[pattern] = int(value)
    return out


def synthesize_command(
    captures: Annotated[list[str] | None, typer.Argument(
        help="A capture written by `threadwise observe`; or many (files, directories, globs, a Parquet "
             "tree of host=H/capture=C/): one profile for the fleet.", show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Profile name.")] = None,
    output: MaybeOutput = None,
    request: Annotated[list[str] | None, typer.Option(
        "--request", help="CPU request of a group's pod: PATTERN=MILLICORES (repeatable).")] = None,
    example: Annotated[bool, typer.Option("--example", help="Write a valid sample profile.")] = False,
    max_groups: Annotated[int, typer.Option(
        "--max-groups", min=1, max=15,
        help="Group budget (the workload's catch-all included): idle groups fold, look-alikes merge.")] = 6,
    families: Annotated[Path | None, typer.Option(
        "--families", help="Runtime families file (default: synthesize/data/families-1.toml).")] = None,
    force: Force = False,
    shape: MaybeShapeSpec = None,
    engine: EngineOption = FleetEngine.duckdb,
    spark_master: SparkMaster = None,
    host_quantile: HostQuantile = DEFAULT_HOST_QUANTILE,
) -> None:
    """Write a profile TOML for a captured workload (or a sample with --example).

    The profile goes to profiles/NAME.toml, or to -o FILE. With --shape (the target machine, when
    known; train passes its lab's) exclusive groups get at most its cores minus the reserve, sized
    down or made default otherwise, so `lint` is clean there; without it the profile is
    machine-independent.

    Many captures of one service (its hosts) give one profile: each group sized at --host-quantile
    of the hosts' CPU shares, its comment saying on how many hosts it was seen and where they
    disagree (docs/fleet.md): threadwise synthesize 'fleet/host=*' --name web
    """
    # deferred: these load pydantic (~80 ms); `threadwise --help` imports this module
    from threadwise.shape import parse_shape
    from threadwise.synthesize.example import example_profile
    from threadwise.synthesize.from_capture import FleetOptions, check, synthesize_capture, synthesize_fleet
    from threadwise.synthesize.schema import check_name
    from threadwise.synthesize.writer import dumps

    if name is not None:
        check_name(name)
    target = parse_shape(shape) if shape is not None else None   # a bad shape before any work
    if output is not None:  # refused before any work; the default path is checked once the name is known
        check_new_output(output, force=force)

    def report(line: str) -> None:
        typer.echo(line, err=True)

    if example:
        profile = example_profile(name or "example")
        check(profile, report)
    else:
        if not captures or name is None:
            raise UsageError("synthesize needs CAPTURE and --name NAME (or --example)",
                             hint="threadwise synthesize capture.duckdb --name redis")
        # deferred: loads pydantic; `threadwise --help` imports this module
        from threadwise.synthesize.families import load_families

        if names_a_fleet(captures):
            profile = synthesize_fleet(captures, name, report=report, shape=target,
                                       requests=_requests(request), max_groups=max_groups,
                                       families=load_families(families),
                                       fleet=FleetOptions(engine.value, spark_master, host_quantile))
        else:
            profile = synthesize_capture(Path(captures[0]), name,
                                         where=output or Path("profiles") / f"{name}.toml", report=report,
                                         shape=target, requests=_requests(request), max_groups=max_groups,
                                         families=load_families(families))
    path = write_output(output or Path("profiles") / f"{profile.name}.toml", dumps(profile), force=force)
    typer.echo(f"wrote {path}: {len(profile.groups)} groups "
               f"({', '.join(f'{g.name}={g.treatment.value}' for g in profile.groups)})")


def _evidence_json(note: RecordNote | None) -> dict[str, object] | None:
    return None if note is None else {"record": note.record, "applies": note.applies,
                                      "text": plain(note.sentence)}


def _validate(profile: Path, as_json: bool, record: RecordCheck | None) -> None:
    # deferred: loads pydantic; `threadwise --help` imports this module
    from threadwise.synthesize.comments import review_warnings
    from threadwise.synthesize.reader import read_text
    from threadwise.synthesize.rules import check_file

    parsed, problems = check_file(profile)
    note = record(profile, parsed) if record is not None and parsed is not None else None
    if parsed is not None:   # comments and the header's verdict against the values and the record
        problems = [*problems, *review_warnings(profile, parsed, read_text(profile), note)]
    errors = [d for d in problems if d.severity == "error"]
    summary = (f"{profile}: invalid ({_count(len(errors), 'error')}, "
               f"{_count(len(problems) - len(errors), 'warning')})")
    if as_json:
        typer.echo(json.dumps({"file": str(profile), "valid": not errors,
                               "problems": [d.as_dict() for d in problems],
                               "evidence": _evidence_json(note)}, indent=2))
        if errors:
            raise InputError(summary, hint="the problems are listed in the JSON report")
    elif errors:  # the verdict first, then each problem with its line and hint
        raise InputError("\n".join([summary, *(diag.render() for diag in problems)]),
                         hint="fix each problem above (docs/profile-schema.md has the keys, types "
                              "and ranges)")
    else:
        for diag in problems:
            typer.echo(diag.render(), err=True)
    if not as_json and parsed is not None:
        if note is not None:
            typer.echo(f"{profile}: evidence: {plain(note.sentence)}")
        typer.echo(f"{profile}: valid ({_count(len(parsed.groups), 'group')}, "
                   f"{_count(len(problems), 'warning')})")


def _validate_command(record: RecordCheck | None) -> Callable[..., None]:
    """The `validate` command; `record` (refine's, handed in by the CLI shell) reads the training
    record a trained profile's header names."""

    def validate_command(
        profile: Annotated[Path, typer.Argument(help="A profile TOML.")],
        as_json: Json = False,
    ) -> None:
        """Check a profile against the schema and scx_layered 1.1.4's matchers and limits.

        Warns on comments its values no longer give (a treatment line above another treatment).

        For a trained profile: whether its record measured it (only then does its header's verdict hold).
        """
        _validate(profile, as_json, record)

    return validate_command


def compile_command(
    profile: Annotated[Path, typer.Argument(help="A profile TOML.")],
    shape: ShapeSpec = "host",
    output: MaybeOutput = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Run scx_layered --print-and-exit on the result and compare.")] = False,
    force: Force = False,
) -> None:
    """Compile a profile into an scx_layered JSON layer config for a machine shape.

    The JSON goes to stdout, or to -o FILE. With --check, a config scx_layered refuses, or changes,
    exits 8 (ConfigRefused).
    """
    # deferred: these load pydantic (~80 ms); `threadwise --help` imports this module
    from threadwise.shape import parse_shape
    from threadwise.synthesize import oracle
    from threadwise.synthesize.compile import compile_profile
    from threadwise.synthesize.rules import load_valid

    if output is not None:
        check_new_output(output, force=force)
    machine = parse_shape(shape)
    compiled = compile_profile(load_valid(profile), machine)
    for note in compiled.notes:
        typer.echo(f"note: {note}", err=True)
    if check:
        bad = oracle.check(compiled.config, args=compiled.scx_args)
        if bad:
            raise ConfigRefused("scx_layered did not keep these options: " + "; ".join(bad),
                                hint="this is a bug in threadwise compile; please report it with the profile")
        typer.echo(f"checked: scx_layered {SCX_LAYERED_VERSION} accepts the config "
                   "and kept every option", err=True)
    if output is None:
        typer.echo(compiled.to_json(), nl=False)
    else:
        write_output(output, compiled.to_json(), force=force)
        typer.echo(f"wrote {output}: {len(compiled.config)} layers for {machine.describe()}",
                   err=True)
    if compiled.scx_args:
        typer.echo(f"scx_layered flags ([scheduler]): {' '.join(compiled.scx_args)}", err=True)
    if compiled.hints:   # what the runtime writes into the task-hint map, by process title
        typer.echo("task hints (title -> HintEquals): " + ", ".join(
            f"{t!r} -> {n}" for t, n in compiled.hints.items())
            + f"; a process whose title stops matching -> {compiled.default_hint}", err=True)


def lint_command(
    profile: Annotated[Path, typer.Argument(
        help="A profile TOML, or an scx_layered JSON layer config.")],
    shape: ShapeSpec = "host",
    capture: Annotated[Path | None, typer.Option(
        "--capture", help="A capture taken under the profile (observed placement).")] = None,
    smt_threshold: Annotated[float, typer.Option(
        "--smt-threshold", help="Share of the capture two exclusive threads may co-run on "
        "sibling CPUs before smt_collision fires.")] = 0.05,
    as_json: Json = False,
) -> None:
    """Check placement invariants: smt_collision, oversubscribed, uncovered, overlap.

    Exits 7 (findings) when an error-level finding is reported, 0 when none is.
    """
    # deferred: these load pydantic (~80 ms); `threadwise --help` imports this module
    from threadwise.shape import parse_shape
    from threadwise.synthesize.layers import load_layer_config, views_from_config, views_from_profile
    from threadwise.synthesize.lint import lint
    from threadwise.synthesize.rules import load_valid

    machine = parse_shape(shape)
    process: str | None = None
    if profile.suffix == ".json":
        if not profile.exists():
            raise UsageError(f"{profile}: no such file",
                             hint="give a profile TOML or an scx_layered layer config (.json)")
        views = views_from_config(load_layer_config(profile), machine)
    else:
        parsed = load_valid(profile)
        process = parsed.workload.process
        views = views_from_profile(parsed, machine)
    facts = None
    if capture is not None:
        # deferred: loads polars and duckdb (analysis); `threadwise --help` imports this module
        from threadwise.synthesize.lint_capture import capture_of

        facts = capture_of(process, capture, instead="or lint without --capture")
    findings = lint(views, machine, facts, smt_threshold)
    if as_json:
        typer.echo(json.dumps({"file": str(profile), "shape": machine.as_dict(),
                               "findings": [f.as_dict() for f in findings]}, indent=2))
    else:
        for finding in findings:
            typer.echo(finding.render())
        if capture is None:
            typer.echo("note: without --capture, uncovered threads are not checked", err=True)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise FindingsReported(f"{profile}: {len(errors)} placement problems on "
                               f"{machine.describe()}",
                               hint="each finding above says why it matters; compile applies the profile "
                                    "as it says (a demoted group still runs, sharing CPUs)")
    if not as_json:
        typer.echo(f"{profile}: no placement problems on {machine.describe()}")


def _diff_command(record: RecordCheck | None) -> Callable[..., None]:
    """The `diff` command; `record` as for `validate`."""

    def diff_command(
        old: Annotated[Path, typer.Argument(help="The profile before (e.g. the base branch's).")],
        new: Annotated[Path, typer.Argument(help="The profile after.")],
        shape: MaybeShapeSpec = None,
        capture: Annotated[Path | None, typer.Option(
            "--capture", help="Place a capture's threads (default: the profiles' evidence names).")] = None,
        output_format: Annotated[str, typer.Option(
            "--format", help="text, or markdown (a pull-request comment).")] = "text",
    ) -> None:
        """Semantic diff of two profiles: groups, treatments, sizing, threads that change layer.

        Threads that leave or join the profile too, and whether its training record measured each profile.
        With --shape, the layers each compiles to on that machine are compared too.
        """
        # deferred: these load pydantic (~80 ms); `threadwise --help` imports this module
        from threadwise.shape import parse_shape
        from threadwise.synthesize.diff import diff_profiles
        from threadwise.synthesize.diff_render import evidence_lines, render_markdown, render_text
        from threadwise.synthesize.rules import load_valid

        if output_format not in ("text", "markdown"):
            raise UsageError(f"--format {output_format!r} is not known", hint="use text or markdown")
        result = diff_profiles(old, new, shape=parse_shape(shape) if shape else None, capture=capture)
        if record is not None:
            result.evidence = evidence_lines([(path, record(path, load_valid(path))) for path in (old, new)])
        typer.echo(render_markdown(result) if output_format == "markdown" else render_text(result), nl=False)

    return diff_command


def register(app: typer.Typer, *, record: RecordCheck | None = None) -> None:
    """synthesize's commands; `record` (refine.evidence.record_note, handed in by the CLI shell,
    which sits above both stages) reads a trained profile's training record for validate and diff."""
    app.command("synthesize")(synthesize_command)
    app.command("validate")(_validate_command(record))
    app.command("compile")(compile_command)
    app.command("lint")(lint_command)
    app.command("diff")(_diff_command(record))
