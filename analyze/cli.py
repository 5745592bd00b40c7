"""CLI commands of the analyze stage: `analyze`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from threadwise.errors import UsageError
from threadwise.options import (
    DEFAULT_HOST_QUANTILE,
    EngineOption,
    FleetEngine,
    HostQuantile,
    Json,
    MaybeOutput,
    SparkMaster,
    names_a_fleet,
)


def analyze_command(
    captures: Annotated[list[str] | None, typer.Argument(
        help="A capture file written by `threadwise observe`; or many (files, directories, globs, "
             "a Parquet tree of host=H/capture=C/): one fleet.", show_default=False)] = None,
    as_json: Json = False,
    store: Annotated[bool, typer.Option(
        "--store/--no-store", help="Also write the analysis_* tables to CAPTURE's analysis file, "
                                   "NAME.analysis.duckdb beside it (the capture itself is never "
                                   "written).")] = False,
    output: MaybeOutput = None,
    threads: Annotated[bool, typer.Option(
        "--threads/--no-threads", help="Include per-thread rows and chains in --json.")] = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Explain every column and term of the output, and the treatments; "
                          "needs no capture.")] = False,
    engine: EngineOption = FleetEngine.duckdb,
    spark_master: SparkMaster = None,
    host_quantile: HostQuantile = DEFAULT_HOST_QUANTILE,
) -> None:
    """Find thread groups, their roles and the comm prefixes that select them.

    Computes per-thread features (CPU share, slices, run-queue latency, wakeups,
    preemptions), the wake graph and its chains, groups threads by name pattern
    (or by behaviour when all share one name), assigns each group a role
    (compute, latency, housekeeping, batch, default) with a confidence, and
    prints it. The capture is only read, never changed (its sha256 holds); --store
    also writes the tables to an analysis file beside it, -o FILE to FILE instead.

    Examples:

      threadwise analyze rolesim.duckdb

      threadwise analyze redis.duckdb --json > redis-analysis.json

      threadwise analyze rolesim.duckdb --store   # tables in rolesim.analysis.duckdb

      threadwise analyze --explain   # what each column means

    Many captures (a fleet: files, directories, globs or a Parquet tree) give one set of groups:
    each capture is analyzed, a group is the same group on every host where its pattern is, and
    each is sized at --host-quantile of the hosts' CPU shares, with host counts and where the
    hosts disagree (docs/fleet.md):

      threadwise analyze 'fleet/host=*' --engine spark --spark-master local[2]
    """
    # deferred: loads polars, duckdb and sklearn (analysis); `threadwise --help` imports this module
    from threadwise.analyze.api import analyze_capture
    from threadwise.analyze.render import explain as glossary
    from threadwise.analyze.render import render
    from threadwise.analyze.store import analysis_target, store_analysis

    if explain:
        typer.echo(glossary())
        return
    if not captures:
        raise UsageError("analyze needs a CAPTURE (or --explain)", hint="threadwise analyze rolesim.duckdb")
    if names_a_fleet(captures):
        _analyze_fleet(captures, engine, spark_master, host_quantile, as_json=as_json,
                       stored=store or output is not None)
        return
    capture = Path(captures[0])
    store = store or output is not None
    if store:
        analysis_target(capture, output)   # refused before the work when it cannot be written
    analysis = analyze_capture(capture)
    if store:
        written = store_analysis(analysis, capture, output=output)
        typer.echo(f"analysis stored in {written}", err=True)
    if as_json:
        typer.echo(json.dumps(analysis.to_dict(threads=threads), indent=2, default=str))
    else:
        typer.echo(render(analysis))


def _analyze_fleet(captures: list[str], engine: FleetEngine, master: str | None, quantile: float, *,
                   as_json: bool, stored: bool) -> None:
    # deferred: loads polars, duckdb and sklearn (analysis); `threadwise --help` imports this module
    from threadwise.analyze.fleet import analyze_fleet, fleet_to_dict, render_fleet

    if stored:
        raise UsageError("--store and -o write one capture's analysis", hint="analyze a fleet without them")
    fleet = analyze_fleet(captures, engine_name=engine.value, master=master, quantile=quantile,
                          progress=lambda line: typer.echo(line, err=True))
    if as_json:
        typer.echo(json.dumps(fleet_to_dict(fleet), indent=2, default=str))
    else:
        typer.echo(render_fleet(fleet))


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze_command)
