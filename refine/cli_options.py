"""The options `ladder`, `train` and `refine` share, declared once (SQLMesh's cli/options.py is the
model): each is a typed alias a command uses as `lab: Lab = False`, so a flag's name and help read
the same in every command. Defaults stay with the commands, where they differ (a ladder's levels
and repeats are not a search's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from threadwise.errors import UsageError
from threadwise.runtime.cli import HostPriority, Switch

__all__ = [
    "SEARCH_REPEATS",
    "SPEC_HELP",
    "Artifacts",
    "Cpus",
    "EarlyStop",
    "Force",
    "Guest",
    "HostPriority",
    "Lab",
    "Levels",
    "Profiles",
    "Repeats",
    "SearchRepeats",
    "Seed",
    "Skip",
    "Switch",
    "Window",
    "parse_levels",
]

SPEC_HELP = "A workload TOML file, or the name of a bundled one (see `threadwise workload list`)."

# A search step's repeats. 8: the fewest measured at which a real 1.3x change of the primary is
# called in at least 80% of steps (90.8%) with at most 5% false verdicts (1.2%); at 3 it was
# called in 35% (docs/refine.md "Sample size and power"). A step that is clearly losing stops
# after 3 (--early-stop). `ladder` keeps 3: one comparison to look at, not a search's decision.
SEARCH_REPEATS = 8
# Candidates the screen measures beside the start (docs/search.md "Width and time"): at 12, a
# 4-level training's screen and its confirmation at 8 repeats fit in about 30 lab minutes.
SCREEN_WIDTH = 12

Lab = Annotated[bool, typer.Option(
    "--lab", help="Run every cell in ONE lab VM boot (for hosts without sched_ext; TCG, see docs/lab.md).")]
Cpus = Annotated[int, typer.Option("--cpus", help="Lab vCPUs (keep at or below the host's cores).")]
Guest = Annotated[str, typer.Option(
    "--guest", help="Lab guest: initramfs (self-contained kernel + initramfs holding scx_layered, the "
    "workload and the agent; the default: measurements stay in RAM) or vng (this machine's root "
    "shared read-only; its file I/O stalls under exclusive layers, see docs/refine.md).")]
Levels = Annotated[str, typer.Option("--levels", help="Background spinner counts, comma-separated.")]
Repeats = Annotated[int, typer.Option("--repeats", help="Repeats per arm and level.")]
SearchRepeats = Annotated[int, typer.Option(
    "--repeats", help="Repeats per arm and level (8: calls a real 1.3x change of the primary in 91% of "
    "steps, 3 in 35%; docs/refine.md \"Sample size and power\").")]
Window = Annotated[float | None, typer.Option(
    "--window", help="Seconds per measurement window (default: the workload file's).")]
Seed = Annotated[int, typer.Option("--seed", help="Order and bootstrap seed.")]
Profiles = Annotated[Path, typer.Option("--profiles", help="Where the profile goes (profiles/NAME.toml).")]
Artifacts = Annotated[Path, typer.Option("--artifacts", help="Where the training record goes (NAME/).")]
Force = Annotated[bool, typer.Option("--force", help="Replace an existing profile and record.")]
Skip = Annotated[list[str] | None, typer.Option(
    "--skip", help="A candidate not to measure, by its name as a record's steps print it (e.g. "
    "`io_thd:treatment=latency`): one a previous record measured (repeatable).")]
ScreenWidth = Annotated[int, typer.Option(
    "--screen", min=0, help="Candidates of the start's neighbourhood measured side by side with it in one "
    "lab boot before step 0, which confirms the best of them (0: no screen; docs/search.md).")]
ScreenRepeats = Annotated[int, typer.Option("--screen-repeats", min=1,
                                            help="Repeats of the screen's ladder.")]
NullArm = Annotated[bool, typer.Option(
    "--null-arm/--no-null-arm", help="Measure the null arm in step 0 too: the same scx_layered with every "
    "thread in its catch-all, what the scheduler itself costs apart from the profile.")]
Budget = Annotated[int, typer.Option("--budget", min=0, help="Guided mutations to measure after step 0, "
                                     "each one ladder run against the current best.")]
EarlyStop = Annotated[bool, typer.Option(
    "--early-stop/--no-early-stop",
    help="Stop a step's ladder after a repeat once its candidate is clearly worse than both the best "
    "and the default scheduler (one-sided alpha 0.001: it could be kept by neither rule); the cells so "
    "far are kept and judged. --no-early-stop measures every repeat.")]


def parse_levels(text: str) -> list[int]:
    """`--levels` as sorted, distinct, non-negative spinner counts (UsageError otherwise)."""
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"bad --levels {text!r}",
                         hint="comma-separated spinner counts, e.g. 0,1,2,4,8") from None
    if not levels or levels[0] < 0:
        raise UsageError(f"bad --levels {text!r}", hint="non-negative spinner counts, e.g. 0,2,4")
    return levels
