"""CLI commands of the observe stage: `observe`, `show`, `clean`, and interop's `export` and `import`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from threadwise.durations import optional_duration
from threadwise.errors import UsageError
from threadwise.observe.interop import cli as interop_cli
from threadwise.observe.interop.cli import PlaceThreads
from threadwise.options import Force, Json, MaybeOutput


def observe_command(
    command: Annotated[list[str] | None, typer.Argument(
        help="Launch this command and observe it (write it after --).", show_default=False)] = None,
    pid: Annotated[int | None, typer.Option("--pid", "-p", help="Observe a running process.")] = None,
    comm: Annotated[str | None, typer.Option(
        "--comm", "-c",
        help="Observe every process with this name (15 chars, as the kernel keeps it).")] = None,
    cgroup: Annotated[str | None, typer.Option(
        "--cgroup",
        help="Observe the processes of a cgroup v2 path, e.g. /system.slice/x.service.")] = None,
    duration: Annotated[str | None, typer.Option(
        "--duration", "-d",
        help="How long to trace: 10s, 500ms, 2m (a bare number is seconds). "
             "Default: until Ctrl-C or the target exits.")] = None,
    output: MaybeOutput = None,
    force: Force = False,
    backend: Annotated[str | None, typer.Option(
        help="Tracer backend: libbpf (the C tracer, built by make setup; the default) or bpftrace. "
             "Without this option observe uses libbpf and falls back to bpftrace where libbpf "
             "cannot run.", show_default=False)] = None,
    recover: Annotated[Path | None, typer.Option(
        "--recover", metavar="PATH",
        help="Do not trace: rebuild a capture from what a killed observe left (its "
             "threadwise-observe-* work directory or its .NAME.tmp-PID-START partial capture; "
             "`threadwise clean --keep` lists them). Writes the capture it was writing, or -o.")] = None,
    parquet: Annotated[Path | None, typer.Option(
        "--parquet", metavar="ROOT",
        help="Also write the capture as Parquet under ROOT/host=H/capture=C/ (a fleet's tree; "
             "docs/fleet.md), as `export --format parquet` does.")] = None,
) -> None:
    """Record a workload's threads with eBPF into one DuckDB capture file.

    Traces sched_switch, wakeups (with the waker), migrations, thread births,
    exits and renames on every CPU, and reads the kernel's own runtime of each
    target thread from /proc at start and end. Needs root. The capture goes to -o FILE, or to
    <target>-<time>.duckdb here.

    Examples:

      threadwise observe --comm redis-server -d 10s -o redis.duckdb

      threadwise observe -d 5s -- ./rolesim --hot 2
    """
    # deferred: loads duckdb, numpy and pyarrow; `threadwise --help` imports this module
    from threadwise.observe.capture import observe
    from threadwise.observe.target import Target

    if recover is not None:
        if command or pid or comm or cgroup or duration:
            raise UsageError("--recover takes no target or duration: it traces nothing",
                             hint="threadwise observe --recover PATH [-o OUT.duckdb]")
        _recover(recover, output, force)
        return

    seconds = optional_duration(duration)
    target = Target.from_options(pid=pid, comm=comm, cgroup=cgroup, command=command)
    if output is None:
        import time

        label = (comm or (Path(command[0]).name if command else None)
                 or (f"pid{pid}" if pid else "cgroup"))
        output = Path(f"{label}-{time.strftime('%Y%m%d-%H%M%S')}.duckdb")
    result = observe(target, output, duration_s=seconds, force=force, backend_name=backend)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"wrote {result.path}: {result.duration_s:.2f} s, {result.events:,} events "
               f"({result.events_per_s:,.0f}/s), {result.events_lost:,} lost "
               f"({result.switch_gaps:,} switch-chain gaps), "
               f"{result.target_threads} target threads, ended by {result.end_reason}")
    if parquet is not None:
        # deferred: duckdb, as observe above
        from threadwise.observe.interop.parquet import export_parquet

        done = export_parquet(result.path, parquet, force=force)
        typer.echo(f"wrote {done.directory}: {done.tables} tables, {done.rows:,} rows as Parquet")


def _recover(leftover: Path, output: Path | None, force: bool) -> None:
    """observe --recover: a capture rebuilt from what a killed observe left."""
    # deferred: loads duckdb, numpy and pyarrow; `threadwise --help` imports this module
    from threadwise.observe.recover import recover

    done = recover(leftover, output, force=force, progress=lambda m: typer.echo(m, err=True))
    typer.echo(f"recovered {done.path}: {done.events:,} events from {done.source}; "
               f"marked recovered (loss beyond switch-chain gaps unknown)")
    for path in done.removed:
        typer.echo(f"removed {path}", err=True)


def show_command(
    capture: Annotated[Path, typer.Argument(help="A capture file written by `threadwise observe`.")],
    as_json: Json = False,
    top: Annotated[int, typer.Option(help="How many threads to list.", min=0)] = 10,
) -> None:
    """Summarize a capture: duration, threads, events, loss, top threads, topology."""
    # deferred: summary loads duckdb, numpy and pyarrow; `threadwise --help` imports this module
    from threadwise.observe import leftovers
    from threadwise.observe.summary import render, summarize

    found = leftovers.find([capture.resolve().parent])
    if found:
        typer.echo(f"note: {leftovers.hint(found)}", err=True)

    info = summarize(capture, top=top)
    typer.echo(json.dumps(info, indent=2, default=str) if as_json else render(info))


def clean_command(
    dirs: Annotated[list[Path] | None, typer.Argument(
        help="Directories to search for partial captures (default: the current one). The temp "
             "directory is always searched for observe work directories.", show_default=False)] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Only list what would be removed.")] = False,
) -> None:
    """Find and remove what killed `observe` runs left behind.

    A partial capture (.NAME.tmp-PID-START and its .wal) or a work directory
    (threadwise-observe-* in the temp directory) is removed only when the run
    that made it is gone (its pid and start time no longer match a live
    process). A live run's files and files threadwise did not make are never
    touched. To keep the data, rebuild a capture first:
    `threadwise observe --recover PATH`.
    """
    # deferred: leftovers, which `threadwise --help` (importing this module) does without
    from threadwise.observe import leftovers

    for folder in dirs or []:
        if not folder.is_dir():
            raise UsageError(f"{folder}: {'not a directory' if folder.exists() else 'no such directory'}",
                             hint="clean takes directories to search for partial captures")
    found = leftovers.find(dirs)
    if not found:
        typer.echo("clean: no leftovers of killed observe runs")
        return
    for leftover in found:
        typer.echo(("keep    " if keep else "remove  ") + leftover.describe())
        if not keep:
            leftovers.remove(leftover)
    total = sum(leftover.size for leftover in found)
    verb = "would free" if keep else "freed"
    typer.echo(f"clean: {len(found)} leftover(s), {verb} {total / 1e6:.1f} MB")


def register(app: typer.Typer, *, place_threads: PlaceThreads | None = None) -> None:
    """observe's commands, then interop's; `place_threads` (synthesize's, handed in by the CLI
    shell) places a capture's threads in a profile's layers for `export --profile`."""
    app.command("observe", context_settings={"allow_interspersed_args": False})(observe_command)
    app.command("show")(show_command)
    app.command("clean")(clean_command)
    interop_cli.register(app, place_threads=place_threads)
