"""CLI commands of interop: `export` (capture -> Perfetto trace) and `import` (trace -> capture)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def export_command(
    capture: Annotated[Path, typer.Argument(help="A capture file (threadwise observe or import).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Trace file to write, e.g. run.pftrace.")],
    format_name: Annotated[str, typer.Option("--format", help="Output format: perfetto.")] = "perfetto",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output file.")] = False,
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="The profile applied while the capture was taken: each thread's layer "
                          "becomes a track of the thread named `layer NAME`.")] = None,
) -> None:
    """Write a capture as a Perfetto protobuf trace (open it at ui.perfetto.dev).

    Per-CPU ftrace bundles of sched_switch and sched_waking (compact_sched
    encoding, full events where the compact form would lose something),
    migrations, thread births, exits and renames, process and thread names, the
    capture window and its loss.

    Example: threadwise export rolesim.duckdb --format perfetto -o rolesim.pftrace
    """
    from threadwise.errors import UsageError
    from threadwise.observe.export_perfetto import export_perfetto

    if format_name != "perfetto":
        raise UsageError(f"unknown export format {format_name!r}",
                         hint="the one format is: --format perfetto")
    done = export_perfetto(capture, output, force=force, profile=profile)
    typer.echo(f"wrote {done.path}: {done.bytes_written:,} bytes, {done.events:,} events "
               f"({done.switches:,} sched_switch, {done.wakings:,} sched_waking, {done.migrations:,} "
               f"migrations, {done.task_events:,} births/exits/renames; "
               f"{done.compact_switches + done.compact_wakings:,} compact), {done.threads:,} threads, "
               f"{done.processes:,} processes, {done.lost:,} lost by the tracer"
               + (f", threads placed in {done.layers} layers of {profile}" if profile else "")
               + f", in {done.seconds:.1f} s")


def import_command(  # noqa: PLR0917 - typer options
    trace: Annotated[Path, typer.Argument(help="A Perfetto trace or a perf.data from `perf sched record`.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Capture file to write.")],
    pid: Annotated[int | None, typer.Option("--pid", "-p", help="The target process's pid.")] = None,
    comm: Annotated[str | None, typer.Option(
        "--comm", "-c", help="Target every process whose main thread has this name (15 chars).")] = None,
    shape: Annotated[str | None, typer.Option(
        "--shape", help="The recording machine's CPUs when the trace does not say: "
                        "cores=N,threads-per-core=T (or a shape file). Overrides the trace's.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing capture file.")] = False,
) -> None:
    """Build a capture from a trace recorded elsewhere, for analyze and synthesize.

    Record where threadwise is not installed, train here:

      perf sched record -o perf.data -- ./my-server        (or -a sleep 10)

      threadwise import perf.data --comm my-server -o my-server.duckdb

      threadwise analyze my-server.duckdb

    Perfetto traces need the ftrace events sched/sched_switch and
    sched/sched_waking (raw or compact_sched). The capture says it was
    imported and from what, and carries the trace's loss forward.
    """
    from threadwise.observe.import_trace import import_trace

    done = import_trace(trace, output, pid=pid, comm=comm, shape=shape, force=force)
    typer.echo(f"wrote {done.path}: {done.duration_s:.2f} s, {done.events:,} events, "
               f"{done.events_lost:,} lost as the trace reports (switch-chain gaps are added by analysis), "
               f"target pids {','.join(map(str, done.target_tgids))} ({done.target_threads} threads); "
               f"imported from {done.source}; topology {done.topology}")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
    app.command("import")(import_command)
