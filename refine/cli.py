"""CLI commands of the refine stage: `workload check|list|show`."""

from __future__ import annotations

from typing import Annotated

import typer

workload_app = typer.Typer(
    help=(
        "Workload files: what a ladder runs, loads and measures (docs/workload.md).\n\n"
        "  threadwise workload list                   # the bundled ones\n\n"
        "  threadwise workload check my-service.toml  # validate one, print what it does"
    ),
    no_args_is_help=True,
)

SPEC_HELP = "A workload TOML file, or the name of a bundled one (see `threadwise workload list`)."


@workload_app.command("check")
def check_command(
    workload: Annotated[str, typer.Argument(help=SPEC_HELP, show_default=False)],
) -> None:
    """Validate a workload file and summarise it (service, readiness, load, objective)."""
    from threadwise.refine.workload import load_workload, resolve_workload

    path = resolve_workload(workload)
    spec = load_workload(path)
    typer.echo(f"{path}: ok")
    for line in spec.summary():
        typer.echo(f"  {line}")


@workload_app.command("list")
def list_command() -> None:
    """List the bundled workloads with their descriptions."""
    from threadwise.refine.workload import bundled_names, bundled_workload_path, load_workload

    for name in bundled_names():
        typer.echo(f"{name:12s} {load_workload(bundled_workload_path(name)).description}")


@workload_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="A bundled workload's name.", show_default=False)],
) -> None:
    """Print a bundled workload file (a starting point for your own)."""
    from threadwise.refine.workload import bundled_workload_path

    typer.echo(bundled_workload_path(name).read_text(encoding="utf-8"), nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(workload_app, name="workload")
