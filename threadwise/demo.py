"""`threadwise demo`: the README's main job, the pipeline on the bundled workload.

Builds rolesim (threads with known roles), observes it, analyzes the capture,
synthesizes a profile, validates it, compiles it for this machine (checked by
the real scx_layered) and lints its placement. Each step is run as the same
`threadwise` command a user would type, and printed, so the demo doubles as a
walkthrough. Lint findings are results, not failures: on a 2-core machine two
hot threads cannot both get an exclusive core, and the demo says so.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from threadwise.errors import FindingsReported, ThreadwiseError

# Steps whose findings are results for this machine: only the findings code
# (errors.py) goes on; any other non-zero status, 1 included, is a failure.
_FINDINGS_OK = {"lint": {FindingsReported.exit_code}}


def _run(step: list[str]) -> None:
    shown = shlex.join(["threadwise", *step])
    typer.echo(f"\n$ {shown}", err=False)
    result = subprocess.run([sys.executable, "-m", "threadwise.cli", *step], check=False)
    if result.returncode in _FINDINGS_OK.get(step[0], set()):
        typer.echo(f"(the demo goes on: {step[0]}'s findings above are results for this machine)")
    elif result.returncode != 0:
        raise ThreadwiseError(f"demo step failed with status {result.returncode}: {shown}")


def demo_command(
    out: Annotated[Path, typer.Option(help="Directory for the demo's outputs.")] = Path("build/demo"),
    duration: Annotated[str, typer.Option(help="How long to observe the workload.")] = "5s",
    hot: Annotated[int, typer.Option(help="rolesim's CPU-bound hot-N threads.")] = 2,
) -> None:
    """Run the pipeline on the bundled workload: observe, analyze, synthesize, compile, lint."""
    from threadwise.durations import parse_duration
    from threadwise.refine.bundled import build

    parse_duration(duration)
    out.mkdir(parents=True, exist_ok=True)
    binary = build("rolesim")
    capture = out / "rolesim.duckdb"
    profile = out / "rolesim.toml"
    config = out / "rolesim.layered.json"
    steps = [
        ["observe", "-d", duration, "-o", str(capture), "--force", "--",
         str(binary), "--hot", str(hot), "--workers", "3"],
        ["show", str(capture)],
        ["analyze", str(capture)],
        ["synthesize", str(capture), "--name", "rolesim", "-o", str(profile)],
        ["validate", str(profile)],
        ["compile", str(profile), "--shape", "host", "--check", "-o", str(config)],
        ["lint", str(profile), "--shape", "host", "--capture", str(capture)],
    ]
    for step in steps:
        _run(step)
    typer.echo(f"\ndemo done: capture {capture}, profile {profile}, scx_layered config {config}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
