"""The ladder's plan: which arms, which background levels, how many repeats, in what order.

Problem: the plan is what every part of a ladder reads: the ladder renders and runs it,
blockers.py adds its trace cells to it, ingest and the store record it. Kept inside ladder.py,
blockers.py (which ladder.py calls while rendering) had to import ladder.py back.

Approach: the plan's types (`Arm`, `Cell`, `Plan`) and how cells are laid out (`plan_cells`:
per repeat, the arms take turns; in its turn an arm runs every level once, ascending) live here,
below both; ladder.py keeps rendering and running. The turns' order `rotate` (the default) starts
repeat r at arm r (cyclically), so over as many repeats as arms each arm takes each position
once: with three or more arms ABBA kept the middle arms in the middle (a step's candidate always
ran between the baseline and the best, confounding arm with position and time since attach).
With two arms it is ABBA. `abba` (reversed every repeat) and `shuffle` (seeded) remain.
An arm may run fewer repeats than the plan (`fewer`: its first k, then it sits out its turns):
a training's null arm is reported, never decided on, and at k = the number of arms under
`rotate` it still takes each position once (docs/search.md "Time").
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from threadwise.errors import UsageError

if TYPE_CHECKING:
    from threadwise.refine.measure.workload import Workload
    from threadwise.synthesize.api import LayerConfig

BASELINE = "baseline"
AA_ARM = "baseline-aa"  # a second, identical baseline arm: the A/A noise floors
ORDERS = ("rotate", "abba", "shuffle")
DEFAULT_ORDER = "rotate"
DEFAULT_LEVELS = (0, 1, 2, 4, 8)
ARM_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass(frozen=True)
class Arm:
    """One arm: the baseline (nothing attached) or a profile compiled for the guest's shape.

    The one arm type of refine: the loop builds them (vetting.Vetted.arm), `threadwise ladder`
    reads them from files (run.arm_from_file), the ladder runs them. The config stays typed;
    it becomes JSON text only where it leaves: arms/ARM.json for the agent, the ladder file's
    `arm.config_json` column."""

    name: str
    profile_toml: str | None = None  # the profile as measured
    config: LayerConfig | None = None  # its scx_layered config for the shape
    scx_args: tuple[str, ...] = ()  # scx_layered flags (the profile's [scheduler] table)

    @property
    def is_baseline(self) -> bool:
        return self.config is None


@dataclass(frozen=True)
class Cell:
    idx: int
    arm: str
    level: int
    repeat: int


@dataclass(frozen=True)
class Plan:
    workload: Workload
    arms: tuple[Arm, ...]
    levels: tuple[int, ...]
    repeats: int
    order: str
    seed: int
    shape: str  # the shape the profile arms were compiled for
    workload_toml: str = ""  # the workload file as read, kept with the run
    background_duty: float = 1.0  # share of the time each spinner is busy (1.0: always)
    turns: tuple[tuple[str, tuple[Cell, ...]], ...] = field(default=())

    @property
    def cells(self) -> list[Cell]:
        return [cell for _, cells in self.turns for cell in cells]

    def arm(self, name: str) -> Arm:
        return next(arm for arm in self.arms if arm.name == name)


def check_arm_name(name: str) -> str:
    if not name or not set(name) <= ARM_NAME_CHARS:
        raise UsageError(f"bad arm name {name!r}", hint="letters, digits, '_', '.', '-'")
    return name


Turns = tuple[tuple[str, tuple[Cell, ...]], ...]


def plan_cells(arms: list[str], levels: list[int], repeats: int, order: str,
               seed: int, *, fewer: Mapping[str, int] | None = None) -> Turns:
    """Turns of (arm, its cells for one repeat) in execution order; an arm named in `fewer`
    runs only its first that many repeats."""
    fewer = dict(fewer or {})
    if order not in ORDERS:
        raise UsageError(f"unknown order {order!r}", hint=f"one of {', '.join(ORDERS)}")
    if repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if not levels or any(level < 0 for level in levels):
        raise UsageError(f"bad levels {levels}", hint="non-negative spinner counts, e.g. 0,1,2,4,8")
    if len(set(arms)) != len(arms):
        raise UsageError(f"arm names repeat: {arms}", hint="give each profile arm its own name")
    if not set(fewer) <= set(arms) or any(not 1 <= k <= repeats for k in fewer.values()):
        raise UsageError(f"bad per-arm repeats {fewer}", hint=f"arms of the plan, each 1..{repeats}")
    rng = random.Random(seed)
    turns = []
    idx = 0
    for repeat in range(1, repeats + 1):
        if order == "rotate":
            shift = (repeat - 1) % len(arms)
            sequence = arms[shift:] + arms[:shift]
        elif order == "abba":
            sequence = arms if repeat % 2 else list(reversed(arms))
        else:
            sequence = list(arms)
            rng.shuffle(sequence)
        for arm in sequence:
            if repeat > fewer.get(arm, repeats):
                continue
            cells = []
            for level in sorted(levels):
                cells.append(Cell(idx, arm, level, repeat))
                idx += 1
            turns.append((arm, tuple(cells)))
    return tuple(turns)


def make_plan(workload: Workload, arms: list[Arm], *, levels: list[int], repeats: int,
              order: str = DEFAULT_ORDER, seed: int = 1, shape: str, workload_toml: str = "",
              background_duty: float = 1.0, fewer: Mapping[str, int] | None = None) -> Plan:
    for arm in arms:
        check_arm_name(arm.name)
    turns = plan_cells([arm.name for arm in arms], levels, repeats, order, seed, fewer=fewer)
    return Plan(workload, tuple(arms), tuple(sorted(levels)), repeats, order, seed, shape,
                workload_toml, background_duty, turns)
