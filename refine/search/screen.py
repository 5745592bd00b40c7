"""Screen, then confirm: many candidates side by side in one lab boot, the top one confirmed.

Problem: a lab ladder costs minutes, so a search that measures one candidate per ladder at full
repeats tries two or three changes in a training and stops before the one that wins (onnxrt's
`onnxload:treatment=default`, 1.58x at bg=4 and within noise at bg=0, was the fourth in line
behind three confinement rules). Screening many candidates in one ladder is cheap per candidate
(they share the boot, the service start, the baseline and the A/A arm) but each is measured
only a few times, so a screen's "best" is partly the luckiest: if its numbers decided, screening
twenty identical arms would turn A/A noise into a win.

Approach (docs/search.md): two rungs, as in successive halving and racing (F-Race, irace).
- The screen: one ladder of the default scheduler (`baseline`), its A/A twin, the null arm
  (the same scx_layered, every thread in the catch-all), the start profile and up to `width`
  candidates of the start's neighbourhood (`screen_candidates`: every operator's candidates taken
  in turn, so treatments, structure and options are all represented), at the training's lowest
  and highest background levels and few repeats. Each arm is scored against the default
  scheduler (`score`): per level and objective metric, its mean paired log ratio against the
  geometric mean of the two default-scheduler cells of the same repeat, in units of that level's
  A/A spread (at least the judge's 5% resolution). An arm's `loss` is how far its worst unit
  lies beyond one unit on the bad side; its `gain` its best primary unit; its `worst` the unit
  of its weakest metric and level. Ranked (`RANK_RULE`) by loss; among equal losses an arm with a
  clear gain (at least `CLEAR_GAIN_UNITS`) first, and among those the safest (highest worst)
  first, then gain. Why safety before gain: the keep rule asks for a gain at one level and no loss
  at any; once the gain is clear, a larger one does not make the confirmation likelier to pass,
  a margin at the weakest level does (mariadb's screen put `other:preempt=true` first on its bg=4
  gain, 0.963x at bg=0; step 0 read 0.88x there and it lost). The screen's table stores the rule
  it ranked by (`rank_rule`); `loss-then-gain` (loss, then gain) ranked the screens before it.
- The confirmation is the search's step 0 (loop.py) on the screen's top arm: a fresh ladder at
  the training's repeats and levels, judged by the one judge with its unchanged rule. The screen
  only chooses what is confirmed; no verdict or decision reads its numbers. So the false-verdict
  rate of the answer is that of one confirmed comparison (the judge's calibration), however many
  candidates were screened: the selection and the verdict never share data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from threadwise.refine.measure.judge import Judged
from threadwise.refine.measure.ladder import AA_ARM, BASELINE, Arm
from threadwise.refine.measure.stats import RESOLUTION, Direction, Measured, aa_ratios, log_ratio
from threadwise.refine.search.candidate import Candidate
from threadwise.refine.search.mutate import mutations_by_operator
from threadwise.refine.search.vetting import Rejected, Vetted
from threadwise.shape import Shape
from threadwise.synthesize.api import Profile, compile_null, oracle_check

NULL_ARM = "null"   # the same scx_layered, every thread in the catch-all
START_ARM = "start"
Metric = tuple[str, Direction]
UNIT_FLOOR = math.log1p(RESOLUTION)   # no level's unit is narrower than the judge's resolution
# A gain this many A/A units beyond the default's is clear: one repeat's estimate minus its own
# noise (about one unit) still lies a unit above the default.
CLEAR_GAIN_UNITS = 2.0
RANK_RULE = "loss-then-safety"   # how `rank_entries` orders today, stored with every screen row
LOSS_THEN_GAIN = "loss-then-gain"   # how the screens before 2026-12-06 were ranked
RANK_RULES = (LOSS_THEN_GAIN, RANK_RULE)
# Operator classes taken in turn, so a narrow screen still tries each kind of change: what a
# group is (treatment), how the machine is cut (reserve, join, merge, split, sizing), and the
# scx_layered options that decide who holds a CPU (the guide's remedies).
CLASSES: tuple[tuple[str, ...], ...] = (
    ("treatment",),
    ("reserve", "join", "merge", "split", "hot_threads", "cpu_fraction"),
    ("preemptible", "protected", "preempt", "catch_all", "exclusive_slice", "slice_us", "preempt_first",
     "exclusive", "weight", "scheduler"),
)


def null_arm(profile: Profile, *, check: Callable | None = None) -> Arm:
    """The null arm of `profile`: its scx_layered flags and the catch-all alone, checked by the
    scx_layered oracle as every measured config is."""
    compiled = compile_null(profile)
    problems = (check or oracle_check)(compiled.config, compiled.scx_args)
    if problems:
        raise ValueError(f"the null config did not pass scx_layered --print-and-exit: {problems[0]}")
    return Arm(NULL_ARM, None, compiled.config, compiled.scx_args)


def _busiest_first(profile: Profile, found: list[Candidate]) -> list[Candidate]:
    """`found` with the candidates of the groups holding most CPU first (registry order else)."""
    share = {g.name: (g.evidence.cpu_share if g.evidence else 0.0) for g in profile.groups}
    return sorted(found, key=lambda c: -share.get(c.name.split(":", 1)[0], -1.0))


def _in_turn(queues: Sequence[Sequence[Candidate]]) -> list[Candidate]:
    """The queues' first items, then their second ones, and so on."""
    return [c for row in zip_longest(*queues) for c in row if c is not None]


def screen_candidates(profile: Profile, shape: Shape, width: int) -> list[Candidate]:
    """Up to `width` candidates of `profile`'s neighbourhood: one from each operator class in
    turn; within a class, one from each operator in turn, each operator's busiest groups first.
    (Within a class by group alone, a screen of 12 gave memcached four options of its two
    groups and never the catch-all's, the layer of the null arm's loss: docs/search.md.)"""
    found = mutations_by_operator(profile, shape)
    queues = [_in_turn([_busiest_first(profile, found.get(op, [])) for op in ops]) for ops in CLASSES]
    return _in_turn(queues)[:width]


@dataclass(frozen=True)
class Score:
    """One screened arm against the default scheduler, in units of its level's A/A spread."""

    arm: str
    units: dict[tuple[str, int], float]   # (metric, level) -> mean gain in A/A units (+ better)
    ratios: dict[tuple[str, int], float]  # (metric, level) -> geometric-mean ratio to the default
    complete: bool                        # every (metric, level) had a valid pair

    @property
    def worst(self) -> float:
        return min(self.units.values(), default=-math.inf)

    @property
    def loss(self) -> float:
        """How far the worst unit lies beyond one unit on the bad side (0: no loss beyond noise)."""
        return max(0.0, -self.worst - 1.0)

    def gain(self, primary: str) -> float:
        return max((u for (metric, _), u in self.units.items() if metric == primary), default=-math.inf)

    def rank_key(self, primary: str, rule: str = RANK_RULE) -> tuple:
        """Sort key under `rule` (RANK_RULES; the module's note says why safety comes first)."""
        gain = round(self.gain(primary), 6)
        if rule == LOSS_THEN_GAIN:
            return (not self.complete, round(self.loss, 6), -gain, self.arm)
        if rule != RANK_RULE:
            raise ValueError(f"unknown screen rank rule {rule!r} (known: {', '.join(RANK_RULES)})")
        return (not self.complete, round(self.loss, 6), gain < CLEAR_GAIN_UNITS, -round(self.worst, 6),
                -gain, self.arm)


def _unit(measured: Measured, level: int, metric: str) -> float:
    """The A/A spread of one level (root mean square of the twin's log ratios), at least the
    judge's resolution; the resolution alone where the level has no A/A pair."""
    aa = aa_ratios(measured, (BASELINE, AA_ARM), level, metric)
    spread = math.sqrt(sum(e * e for e in aa) / len(aa)) if aa else 0.0
    return max(spread, UNIT_FLOOR)


def _default_cell(measured: Measured, level: int, metric: str, repeat: int) -> float | None:
    """The geometric mean of the default scheduler's valid cells (baseline and its twin) of one
    repeat: a reference with half the noise of either, from the same minutes as the arm's cell."""
    values = [measured.get(arm, {}).get(level, {}).get(metric, {}).get(repeat) for arm in (BASELINE, AA_ARM)]
    kept = [v.value for v in values if v is not None]
    if not kept:
        return None
    if any(v <= 0 for v in kept):
        return sum(kept) / len(kept)
    return math.exp(sum(math.log(v) for v in kept) / len(kept))


def score(measured: Measured, arm: str, metrics: Sequence[Metric], levels: Sequence[int]) -> Score:
    """`arm` against the default scheduler at each (metric, level) of the screen."""
    units: dict[tuple[str, int], float] = {}
    ratios: dict[tuple[str, int], float] = {}
    complete = True
    for metric, direction in metrics:
        sign = 1.0 if direction == "higher" else -1.0
        for level in levels:
            cells = measured.get(arm, {}).get(level, {}).get(metric, {})
            logs = []
            for repeat, obs in sorted(cells.items()):
                reference = _default_cell(measured, level, metric, repeat)
                if reference is not None:
                    logs.append(log_ratio(obs.value, reference))
            if not logs:
                complete = False
                continue
            mean = sum(logs) / len(logs)
            ratios[(metric, level)] = math.exp(mean)
            units[(metric, level)] = sign * mean / _unit(measured, level, metric)
    return Score(arm, units, ratios, complete)


@dataclass(frozen=True)
class Screened:
    """One candidate of the screen: measured (its arm and score) or rejected by vetting."""

    candidate: Candidate
    arm: str | None = None
    vetted: Vetted | None = None
    rejected: str | None = None        # stage: reason, when vetting refused it
    score: Score | None = None
    rank: int | None = None            # 1 = the top; None: not measured


@dataclass(frozen=True)
class ScreenResult:
    """The screen's ladder (arms and comparisons), every candidate with its score, and the top."""

    judged: Judged
    entries: tuple[Screened, ...]
    null: Score | None
    levels: tuple[int, ...]
    primary: str

    @property
    def top(self) -> Screened:
        ranked = [e for e in self.entries if e.rank is not None]
        return min(ranked, key=lambda e: e.rank or 0)

    def because(self) -> str:
        """Why the top is confirmed: its screen figures, as a step's `chosen_because`."""
        top, primary = self.top, self.primary
        measured = sum(1 for e in self.entries if e.rank is not None)
        assert top.score is not None
        figures = ", ".join(f"{metric} bg={level} {ratio:.3g}x" for (metric, level), ratio
                            in sorted(top.score.ratios.items(), key=lambda kv: (kv[0][0] != primary, kv[0])))
        return (f"the screen's top of {measured} arms ({top.candidate.name}: {figures}; "
                f"loss {top.score.loss:.2f}, gain {top.score.gain(primary):.2f}, "
                f"worst {top.score.worst:+.2f} A/A units; ranked {RANK_RULE}): confirmed here")


def rank_entries(entries: Sequence[Screened], primary: str) -> tuple[Screened, ...]:
    """The entries with their ranks (measured ones, by `Score.rank_key` under `RANK_RULE`)."""
    measured = sorted((e for e in entries if e.score is not None),
                      key=lambda e: e.score.rank_key(primary) if e.score else ())
    ranks = {id(e): i for i, e in enumerate(measured, start=1)}
    return tuple(Screened(e.candidate, e.arm, e.vetted, e.rejected, e.score, ranks.get(id(e)))
                 for e in entries)


def run_screen(start: Vetted, candidates: Sequence[Candidate], *, shape: Shape,
               measure: Callable[[list[Arm]], Judged], metrics: Sequence[Metric], levels: Sequence[int],
               vet: Callable[[Candidate, Shape], Vetted | Rejected], null: Arm | None) -> ScreenResult:
    """Vet `candidates`, measure the start, the null arm and every vetted one in one ladder with
    the default scheduler and its twin, and rank them."""
    entries: list[Screened] = [Screened(start.candidate, START_ARM, start)]
    for i, candidate in enumerate(candidates, start=1):
        checked = vet(candidate, shape)
        if isinstance(checked, Rejected):
            entries.append(Screened(candidate, rejected=f"{checked.stage}: {checked.reason}"))
        else:
            entries.append(Screened(candidate, f"c{i:02d}", checked))
    profiles = [*([null] if null is not None else []),
                *(e.vetted.arm(e.arm) for e in entries if e.vetted is not None and e.arm is not None)]
    # The default scheduler first and again half-way (its twin): at one repeat the plan runs the
    # arms in this order, and each arm's reference is the mean of the two, so an arm late in a
    # long run is not compared with the host of its first minutes only.
    half = (len(profiles) + 1) // 2
    arms = [Arm(BASELINE), *profiles[:half], Arm(AA_ARM), *profiles[half:]]
    judged = measure(arms)
    scored = [Screened(e.candidate, e.arm, e.vetted, e.rejected,
                       score(judged.measured, e.arm, metrics, levels) if e.arm else None)
              for e in entries]
    primary = metrics[0][0]
    null_score = score(judged.measured, NULL_ARM, metrics, levels) if null is not None else None
    return ScreenResult(judged, rank_entries(scored, primary), null_score, tuple(levels), primary)
