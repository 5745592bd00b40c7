"""`threadwise demo`: the README's main job on the bundled workload.

Builds rolesim (threads with known roles), observes it, and summarizes the
capture. Later stages extend this (analyze, synthesize, compile, lint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def demo_command(
    out: Annotated[Path, typer.Option(help="Directory for the demo's outputs.")] = Path("build/demo"),
    duration: Annotated[str, typer.Option(help="How long to observe the workload.")] = "5s",
) -> None:
    """Observe the bundled workload (rolesim) and summarize what was captured."""
    from threadwise.observe.capture import observe
    from threadwise.observe.summary import render, summarize
    from threadwise.observe.target import Target, parse_duration
    from threadwise.refine.bundled import build

    seconds = parse_duration(duration)
    out.mkdir(parents=True, exist_ok=True)
    binary = build("rolesim")
    capture_path = out / "rolesim.duckdb"
    target = Target.from_options(pid=None, comm=None, cgroup=None,
                                 command=[str(binary), "--hot", "2", "--workers", "3"])
    result = observe(target, capture_path, duration_s=seconds, force=True)
    typer.echo(f"wrote {result.path}: {result.events:,} events ({result.events_per_s:,.0f}/s), "
               f"{result.events_lost:,} lost\n")
    typer.echo(render(summarize(capture_path)))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
