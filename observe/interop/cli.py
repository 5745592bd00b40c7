"""CLI commands of interop: `export` (capture -> Perfetto trace) and `import` (trace -> capture).

`export --profile` shows each thread's layer under a profile, which only
synthesize can place; observe never imports a later stage, so the function
that places threads comes in through `register` from the CLI shell
(threadwise/cli.py), and export receives its result as data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from threadwise.errors import UsageError
from threadwise.observe.interop.trace_io import check_output
from threadwise.options import Force, MaybeShapeSpec, Output

# (profile path, the capture's (tid, tgid, comm, process comm) threads, its CPU count) ->
# (tid, tgid) -> layer name: synthesize.placement.thread_layers.
PlaceThreads = Callable[[Path, list[tuple[int, int, str, str]], int], dict[tuple[int, int], str]]


def _export(capture: Path, output: Path, format_name: str, force: bool, profile: Path | None,
            place_threads: PlaceThreads | None, host: str | None = None) -> None:
    # deferred: export loads numpy and duckdb, which `threadwise --help` does without
    from threadwise.observe.interop.export_perfetto import ThreadLayers, export_perfetto, export_threads

    if format_name not in ("perfetto", "parquet"):
        raise UsageError(f"unknown export format {format_name!r}",
                         hint="the formats are: --format perfetto, --format parquet")
    if format_name == "parquet":
        _export_parquet(capture, output, force, profile, host)
        return
    if host is not None:
        raise UsageError("--host names a Parquet capture's partition", hint="add --format parquet")
    layers = None
    if profile is not None:
        if place_threads is None:
            raise UsageError("export --profile needs synthesize's layer placement, which this CLI lacks",
                             hint="run it through the `threadwise` command")
        check_output(output, force=force, what="trace")   # refused before any reading, as without --profile
        threads, nr_cpus = export_threads(capture)
        layers = ThreadLayers(str(profile), place_threads(profile, threads, nr_cpus))
    done = export_perfetto(capture, output, force=force, layers=layers)
    typer.echo(f"wrote {done.path}: {done.bytes_written:,} bytes, {done.events:,} events "
               f"({done.switches:,} sched_switch, {done.wakings:,} sched_waking, {done.migrations:,} "
               f"migrations, {done.task_events:,} births/exits/renames; "
               f"{done.compact_switches + done.compact_wakings:,} compact), {done.threads:,} threads, "
               f"{done.processes:,} processes, {done.lost:,} lost by the tracer"
               + (f", threads placed in {done.layers} layers of {profile}" if profile else "")
               + f", in {done.seconds:.1f} s")


def _export_parquet(capture: Path, root: Path, force: bool, profile: Path | None, host: str | None) -> None:
    # deferred: duckdb, which `threadwise --help` does without
    from threadwise.observe.interop.parquet import export_parquet

    if profile is not None:
        raise UsageError("--profile places threads in a Perfetto trace; a Parquet capture keeps every table "
                         "as it is", hint="drop --profile, or use --format perfetto")
    done = export_parquet(capture, root, force=force, host=host)
    typer.echo(f"wrote {done.directory}: {done.tables} tables, {done.rows:,} rows (host {done.host}, "
               f"capture {done.capture_id}); read back with `threadwise import {done.directory} -o FILE`")


def _export_command(place_threads: PlaceThreads | None) -> Callable[..., None]:
    """The `export` command, placing threads with `place_threads` for --profile."""

    def export_command(
        capture: Annotated[Path, typer.Argument(help="A capture file (threadwise observe or import).")],
        output: Output,
        format_name: Annotated[str, typer.Option(
            "--format", help="perfetto (a trace file), or parquet (a directory: one file per table under "
                             "ROOT/host=H/capture=C/).")] = "perfetto",
        force: Force = False,
        profile: Annotated[Path | None, typer.Option(
            "--profile", help="The profile applied while the capture was taken: each thread's layer "
                              "becomes a track of the thread named `layer NAME`.")] = None,
        host: Annotated[str | None, typer.Option(
            "--host", help="With --format parquet: the host's name in the fleet's tree (default: the "
                           "hostname the capture recorded).", show_default=False)] = None,
    ) -> None:
        """Write a capture as a Perfetto protobuf trace (open it at ui.perfetto.dev), or as Parquet.

        Per-CPU ftrace bundles of sched_switch and sched_waking (compact_sched
        encoding, full events where the compact form would lose something),
        migrations, thread births, exits and renames, process and thread names, the
        capture window and its loss. The trace goes to -o FILE (e.g. run.pftrace).

        Example: threadwise export rolesim.duckdb --format perfetto -o rolesim.pftrace

        --format parquet writes every table of the capture as one Parquet file under -o ROOT, in the
        partition ROOT/host=HOST/capture=CAPTURE_ID/ (hive style: one tree holds a fleet's
        captures), each file with the capture's schema version, host, kernel, CPUs and window in
        its metadata (docs/fleet.md). `threadwise import ROOT/host=H/capture=C -o FILE` reads it back.
        """
        _export(capture, output, format_name, force, profile, place_threads, host)

    return export_command


def import_command(
    trace: Annotated[Path, typer.Argument(help="A Perfetto trace, a perf.data from `perf sched record`, or a "
                                                 "capture's Parquet directory (export --format parquet).")],
    output: Output,
    pid: Annotated[int | None, typer.Option("--pid", "-p", help="The target process's pid.")] = None,
    comm: Annotated[str | None, typer.Option(
        "--comm", "-c", help="Target every process whose main thread has this name (15 chars).")] = None,
    shape: MaybeShapeSpec = None,
    force: Force = False,
) -> None:
    """Build a capture from a trace recorded elsewhere, for analyze and synthesize.

    The capture goes to -o FILE. --shape gives the recording machine's CPUs where the trace does not
    say them (and overrides what it says).

    Record where threadwise is not installed, train here:

      perf sched record -o perf.data -- ./my-server        (or -a sleep 10)

      threadwise import perf.data --comm my-server -o my-server.duckdb

      threadwise analyze my-server.duckdb

    Perfetto traces need the ftrace events sched/sched_switch and
    sched/sched_waking (raw or compact_sched). The capture says it was
    imported and from what, and carries the trace's loss forward.
    """
    # deferred: import loads numpy, pyarrow, duckdb and pydantic, which `threadwise --help` does without
    from threadwise.observe.interop.import_trace import import_trace
    from threadwise.observe.interop.parquet import import_parquet

    if trace.is_dir():
        if pid is not None or comm is not None or shape is not None:
            raise UsageError("a Parquet capture keeps its target and shape: --pid, --comm and --shape "
                             "are for traces")
        back = import_parquet(trace, output, force=force)
        typer.echo(f"wrote {back.directory}: {back.tables} tables, {back.rows:,} rows (host {back.host}, "
                   f"capture {back.capture_id})")
        return

    done = import_trace(trace, output, pid=pid, comm=comm, shape=shape, force=force)
    typer.echo(f"wrote {done.path}: {done.duration_s:.2f} s, {done.events:,} events, "
               f"{done.events_lost:,} lost as the trace reports (switch-chain gaps are added by analysis), "
               f"target pids {','.join(map(str, done.target_tgids))} ({done.target_threads} threads); "
               f"imported from {done.source}; topology {done.topology}")


def register(app: typer.Typer, *, place_threads: PlaceThreads | None = None) -> None:
    app.command("export")(_export_command(place_threads))
    app.command("import")(import_command)
