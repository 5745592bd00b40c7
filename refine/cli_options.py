"""The options `ladder`, `train` and `refine` share, declared once (SQLMesh's cli/options.py is the
model): each is a typed alias a command uses as `lab: Lab = False`, so a flag's name and help read
the same in every command; the ones other stages' commands share too (`--cpus`, `--force`,
`--host-priority`, ...) are threadwise/options.py's. train and refine take one option set,
`search_options` (given to both by `with_options`). Defaults stay with the commands where they
differ (a ladder's levels and repeats are not a search's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from threadwise.errors import UsageError
from threadwise.options import Cpus, Force, HostPriority, Switch

__all__ = [
    "SCREEN_WIDTH",
    "SEARCH_REPEATS",
    "SPEC_HELP",
    "Artifacts",
    "Budget",
    "EarlyStop",
    "Guest",
    "Lab",
    "Levels",
    "NullArm",
    "Profiles",
    "Repeats",
    "ScreenRepeats",
    "ScreenWidth",
    "SearchFlags",
    "Seed",
    "Skip",
    "Window",
    "WorkloadSpec",
    "parse_levels",
    "search_options",
]

SPEC_HELP = "A workload TOML file, or the name of a bundled one (see `threadwise workload list`)."

# A search step's repeats. 8: a real 1.3x change of the primary is called in 100% of draws at
# 10-s windows and in 88.7% beside a fast tier, where 3 repeats call it in 35.6%, with at most
# 1.9% false verdicts per comparison on every pool (docs/judge.md "Sample size and power"). A step
# that is clearly losing stops after 3 (--early-stop). `ladder` keeps 3: one comparison to look at.
SEARCH_REPEATS = 8
# Candidates the screen measures beside the start (docs/search.md "Time"). Each costs about 45 s
# under TCG, two thirds of it scx_layered's attach, so the width is a training's main lever on its
# lab minutes: at 12 a JVM service's 4-level training took 31-34. The arm each record's screen
# chose was the start or among the first 4 of 12 candidates in 5 of 6 records (rolesim's was the
# 11th), so 8 keeps those.
SCREEN_WIDTH = 8

WorkloadSpec = Annotated[str, typer.Option("--workload", "-w", help=SPEC_HELP, show_default=False)]
Lab = Annotated[bool, typer.Option("--lab", help="Run every cell in one lab VM boot (for hosts without "
                                   "sched_ext; docs/lab.md).")]
Guest = Annotated[str, typer.Option(
    "--guest", help="Lab guest: initramfs (a self-contained kernel + initramfs holding scx_layered, the "
    "workload and the agent) or vng (this machine's root shared read-only).")]
Levels = Annotated[str, typer.Option("--levels", help="Background spinner counts, comma-separated.")]
Repeats = Annotated[int, typer.Option("--repeats", min=1, help="Repeats per arm and level.")]
Window = Annotated[float | None, typer.Option(
    "--window", help="Seconds per measurement window (default: the workload file's).")]
Seed = Annotated[int, typer.Option("--seed", help="Order and bootstrap seed.")]
Profiles = Annotated[Path, typer.Option("--profiles", help="Where the profile goes (profiles/NAME.toml).")]
Artifacts = Annotated[Path, typer.Option("--artifacts", help="Where the training record goes (NAME/).")]
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
    "and the default scheduler; the cells so far are kept and judged. --no-early-stop measures every "
    "repeat.")]


@dataclass(frozen=True)
class SearchFlags:
    """The options train and refine share, as given (checked and turned into TrainOptions by the
    command, in the order a user's mistakes are reported)."""

    workload: str
    lab: bool
    cpus: int
    guest: str
    host_priority: Switch
    levels: str
    repeats: int
    screen: int
    screen_repeats: int
    null_arm: bool
    budget: int
    window: float | None
    seed: int
    profiles: Path
    artifacts: Path
    force: bool
    skip: tuple[str, ...]
    early_stop: bool


def search_options(
    *,
    workload: WorkloadSpec,
    lab: Lab = False,
    cpus: Cpus = 2,
    guest: Guest = "initramfs",
    host_priority: HostPriority = Switch.on,
    levels: Levels = "0,1,2,4",
    repeats: Repeats = SEARCH_REPEATS,
    screen: ScreenWidth = SCREEN_WIDTH,
    screen_repeats: ScreenRepeats = 1,
    null_arm: NullArm = True,
    budget: Budget = 0,
    window: Window = None,
    seed: Seed = 1,
    profiles: Profiles = Path("profiles"),
    artifacts: Artifacts = Path("artifacts"),
    force: Force = False,
    skip: Skip = None,
    early_stop: EarlyStop = True,
) -> SearchFlags:
    """train's and refine's shared options, declared once (`with_options(search_options)`)."""
    return SearchFlags(workload=workload, lab=lab, cpus=cpus, guest=guest, host_priority=host_priority,
                       levels=levels, repeats=repeats, screen=screen, screen_repeats=screen_repeats,
                       null_arm=null_arm, budget=budget, window=window, seed=seed, profiles=profiles,
                       artifacts=artifacts, force=force, skip=tuple(skip or ()), early_stop=early_stop)


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
