"""The diagnosis of a ladder: which metric failed at which level, worst first.

Problem: the refine loop used to try mutations in registry order, so with a
budget of a few lab steps (4 min each) it measured treatment swaps of the
compute group while the record said plainly what was wrong: the worker's
p99 was 96x the default scheduler's at bg=0. The search should aim at what
failed, and a reviewer should see which failure each step aimed at.

Approach: a pure function of stored comparison rows (the `comparison`
table's columns; the loop converts its in-memory comparisons with `rows_of`,
which are the same numbers judge.judge stores). Two rules, the judge's own:
- rows against the baseline (the current best against the default
  scheduler) fail where the ladder verdict does (stats.ladder_verdict): a
  metric `worse` at a level; and, when the primary is `better` at no level,
  the primary `not better` at every level under background (level > 0; every
  level when the ladder has no background);
- rows against another arm (a candidate against the best) fail where the
  keep rule vetoed it (stats.pareto_verdict): a metric `worse` at a level.
  The loop passes only the best's rows against the baseline: a reverted
  candidate's regressions say what that candidate broke, not what the best
  still lacks (the rolesim retrain of 2026-11-24 aimed step 3 at
  hot:treatment=latency's 49.8x regression of the worker p99 at bg=2).
- margins, after every failure: against the baseline, a metric judged
  within noise whose ratio lies in the bad half of its noise band (past half
  the floor on the bad side: nearer the floor than parity; Kind.EDGE; in that
  retrain's run 4 the best's hot at bg=0 0.919x, floor x1.11, and worker p99
  at bg=0 1.38x, floor x1.82). A profile that
  wins can still lose at its next measurement where it sits this close to a
  floor: rolesim's trained profile won in its own step and then, measured
  again, read the worker p99 at bg=0 2.76x worse; re-measured twice at five
  repeats, one of hot (0.895) or the p99 (1.84x) at bg=0 tipped past its
  floor each time. With no failure left, the search aims at these.
Each failure is measured by how far its ratio lies beyond the floor on the
bad side, in log units: `beyond = log(ratio) x sign - floor`, sign +1 for a
lower-is-better metric, -1 for a higher-is-better one, floor the interval's
half-width. A `worse` verdict has beyond > 0 (the interval's near edge is past
1); a `not better` primary has beyond <= 0 (its shortfall). Failures are
ordered by beyond, largest first, so a regression always comes before a
missing gain and the larger regression before the smaller; margins (beyond
<= 0 too) follow every failure, the one nearest its floor first; ties by
metric, level and arms, so the order is deterministic.
A failure's remedy follows its metric's direction: a lower-is-better metric
(a latency: rolesim's worker p99, redis's get p99, cyclictest's primary) is
fixed by who holds a CPU when its threads wake; a higher-is-better one (a
rate) by the CPU its threads own under background (guide.py), except a rate
judged worse (or on the bad side of noise) with no background (bg=0), where
nothing competes for the CPU:
that is the cost of the confinement itself (rolesim: the exclusive layer cost
hot 25% at bg=0 where a null profile cost it nothing), fixed by loosening the
exclusive group's ownership.

Silent windows come before every ratio: where the load is read from the
service's own report lines (`[load] source = "service"`), a window with no
report line is invalid, and a level left with too few valid pairs is
insufficient, which no keep rule can decide (poolservice, 2026-11-28: its
main thread prints the reports and sat in the housekeeping group beside two
busy request threads, and 6 windows under background had no line; the
search spent its steps on the request pool meanwhile). A silent window is a
failure of the arm itself (Kind.SILENT, from `silent_cells`: the cells the
judge could not read), placed first whatever the ratios say, with its own
remedy (Remedy.REPORTER: the reporting thread gets a CPU; guide.py).

Blocker rows (ladder schema 3, written by refine/measure/blockers.py for traced
cells; optional: an empty table changes nothing) say who ran while a latency
group waited; `top_blocker` sums them per waiting group and blocker.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import duckdb

from threadwise.refine.measure.stats import Direction, LadderComparison, Verdict
from threadwise.sqlfiles import statement

BASELINE = "baseline"
CATCH_ALL = "rest"  # the catch-all layer: a blocker with no group ran there


def sql(name: str) -> str:
    """A named statement of `sql/search.sql` (the guided search's queries)."""
    return statement("threadwise.refine", "sql/search.sql", name)


@dataclass(frozen=True)
class Row:
    """One stored comparison: the `comparison` columns the diagnosis reads (None: NULL)."""

    reference: str
    candidate: str
    metric: str
    level: int
    ratio: float | None
    verdict: str
    floor: float | None  # the interval's half-width, log scale


def rows_of(comparison: LadderComparison) -> list[Row]:
    """The rows judge.judge stores for this comparison (NaN as None)."""
    def finite(value: float) -> float | None:
        return None if math.isnan(value) else value

    return [Row(comparison.reference, comparison.candidate, c.metric, c.level, finite(c.ratio),
                c.verdict.value, finite(c.floor)) for c in (*comparison.primary, *comparison.secondary)]


def load_rows(con: duckdb.DuckDBPyConnection, run_id: int) -> list[Row]:
    """Every stored comparison of one ladder run."""
    return [Row(*row) for row in con.execute(sql("comparison_rows"), [run_id]).fetchall()]


class Kind(StrEnum):
    WORSE = "worse"              # a metric worse at a level (either rule)
    NOT_BETTER = "not better"    # the primary better nowhere against the baseline
    EDGE = "worse within noise"  # a margin: within noise against the baseline, past half its floor
    SILENT = "unmeasured"        # windows with no report line from the service (its reporter starved)


class Remedy(StrEnum):
    LATENCY = "latency"    # who holds a CPU when the metric's threads wake
    CAPACITY = "capacity"  # the CPU the metric's threads own under background
    CONFINEMENT = "confinement"  # what owning a CPU costs the metric's threads with no background
    REPORTER = "reporter"  # the service's reporting thread got no CPU in a window (Kind.SILENT)


@dataclass(frozen=True)
class Failure:
    """One metric failing at one level of one comparison, and how far beyond its floor."""

    kind: Kind
    metric: str
    direction: Direction
    primary: bool
    level: int
    ratio: float
    floor: float
    beyond: float
    reference: str
    candidate: str
    silent: int = 0    # Kind.SILENT: the windows without a report line, of `windows`
    windows: int = 0

    @property
    def remedy(self) -> Remedy:
        if self.kind is Kind.SILENT:
            return Remedy.REPORTER
        if self.direction == "lower":
            return Remedy.LATENCY
        # a rate WORSE with no background is not short of CPU (nothing competes): measured on
        # rolesim, a null profile kept hot at 0.99x where its exclusive layer lost 25%
        lost = self.kind in (Kind.WORSE, Kind.EDGE)
        return Remedy.CONFINEMENT if lost and self.level == 0 else Remedy.CAPACITY

    def describe(self) -> str:
        """E.g. `worker_lat_p99_us worse at bg=0 (95.7x vs baseline, floor x8.24)`; a silent level:
        `requests_per_s unmeasured at bg=2 (2 of 3 windows of best without a report line ...)`."""
        if self.kind is Kind.SILENT:
            return (f"{self.metric} {self.kind.value} at bg={self.level} ({self.silent} of "
                    f"{self.windows} windows of {self.candidate} without a report line from the service)")
        return (f"{self.metric} {self.kind.value} at bg={self.level} ({self.ratio:.3g}x vs "
                f"{self.reference}, floor x{math.exp(self.floor):.3g})")


def diagnose(rows: Iterable[Row], *, primary: tuple[str, Direction],
             secondary: Sequence[tuple[str, Direction]] = (),
             baseline: str = BASELINE) -> list[Failure]:
    """The failures of these comparisons, worst first (see the module's note)."""
    directions = dict([*secondary, primary])
    found: list[Failure] = []
    by_pair: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.metric in directions and row.ratio is not None and row.ratio > 0:
            by_pair.setdefault((row.reference, row.candidate), []).append(row)
    for (reference, _candidate), pair in sorted(by_pair.items()):
        failing = [(Kind.WORSE, r) for r in pair if r.verdict == Verdict.WORSE]
        prim = [r for r in pair if r.metric == primary[0]]
        if reference == baseline and prim and not any(r.verdict == Verdict.BETTER for r in prim):
            loaded = [r for r in prim if r.level > 0] or prim
            failing += [(Kind.NOT_BETTER, r) for r in loaded if r.verdict == Verdict.WITHIN_NOISE]
        if reference == baseline:
            taken = {(r.metric, r.level) for _, r in failing}
            failing += [(Kind.EDGE, r) for r in pair if r.verdict == Verdict.WITHIN_NOISE
                        and (r.metric, r.level) not in taken
                        and _bad(r, directions[r.metric]) > (r.floor or 0.0) / 2]
        for kind, r in failing:
            direction = directions[r.metric]
            floor = r.floor or 0.0
            found.append(Failure(kind, r.metric, direction, r.metric == primary[0], r.level,
                                 float(r.ratio or 1.0), floor, _bad(r, direction) - floor,
                                 r.reference, r.candidate))
    return sorted(found, key=lambda f: (f.kind is Kind.EDGE, -f.beyond, f.metric, f.level, f.reference,
                                        f.candidate))


@dataclass(frozen=True)
class Silence:
    """One arm's windows at one level, and how many had no report line from the service."""

    level: int
    windows: int
    silent: int


def load_silences(con: duckdb.DuckDBPyConnection, run_id: int, arm: str) -> list[Silence]:
    """Per level, the arm's windows of one run and its silent ones (`silent_cells`)."""
    return [Silence(*row) for row in con.execute(sql("silent_cells"), [run_id, arm]).fetchall()]


def silent_failures(silences: Iterable[Silence], arm: str, *, primary: tuple[str, Direction],
                    baseline: str = BASELINE) -> list[Failure]:
    """A Kind.SILENT failure of the primary per level where `arm` had a silent window, the level
    with the larger silent share first (then the level); each sorts before every ratio failure."""
    metric, direction = primary
    found = [Failure(Kind.SILENT, metric, direction, True, s.level, s.silent / s.windows, 0.0,
                     math.inf, baseline, arm, s.silent, s.windows)
             for s in silences if s.silent > 0 and s.windows > 0]
    return sorted(found, key=lambda f: (-f.ratio, f.level))


def _bad(row: Row, direction: Direction) -> float:
    """How far the row's ratio lies on its metric's bad side of 1, in log units (< 0: good side)."""
    return math.log(row.ratio or 1.0) * (1 if direction == "lower" else -1)


@dataclass(frozen=True)
class Blocker:
    """One stored blocker row: in a traced cell, `blocker` (of `blocker_group`; None: the
    catch-all) ran on `cpu` for `wait_s` while `waiter_group`'s threads waited."""

    level: int
    waiter_group: str
    blocker: str
    blocker_group: str | None
    cpu: int
    wait_s: float
    waits: int


def load_blockers(con: duckdb.DuckDBPyConnection, run_id: int, arm: str) -> list[Blocker]:
    """The blocker rows of one arm of one run (none where no cell was traced)."""
    return [Blocker(*row) for row in con.execute(sql("blocker_rows"), [run_id, arm]).fetchall()]


# scx_layered's own userspace thread: no group holds it (main.bpf.c runs it ahead of every layer),
# so the layer that answers for it is the [scheduler] table's pseudo-layer, not the catch-all.
SCHEDULER_COMM = "scx_layered"
SCHEDULER = "(scheduler)"


@dataclass(frozen=True)
class TopBlocker:
    """Who held the CPU most while the most-waiting group waited."""

    waiter_group: str
    blocker: str
    layer: str      # the blocker's group, or the catch-all's layer `rest`
    share: float    # of the waiter group's summed wait
    level: int | None  # the level its rows came from (None: several, none at the failure's)

    def describe(self) -> str:
        """E.g. `top blocker rest/bpftool 40% of worker's wait at bg=0`."""
        where = f" at bg={self.level}" if self.level is not None else ""
        return (f"top blocker {self.layer}/{self.blocker} {self.share:.0%} of "
                f"{self.waiter_group}'s wait{where}")


def metric_group(metric: str, groups: Iterable[str]) -> str | None:
    """The group a metric is about, when its name says so (`worker_lat_p99_us` -> `worker`: the
    longest group name followed by `_` that starts the metric's name); None otherwise."""
    named = [g for g in groups if metric.startswith(f"{g}_")]
    return max(named, key=len, default=None)


def top_blocker(rows: Sequence[Blocker], level: int, waiter: str | None = None) -> TopBlocker | None:
    """The top blocker of `waiter` (the group the failing metric is about) when it has rows, else
    of the group that waited most: rows at `level` if any, else every level (blockers.py traces
    the lowest and the top level). Why the metric's group first: in the first retrain with
    blocker rows the feeder waited most at bg=0 (on an idle CPU waking up), while the metric that
    failed was the workers' p99, who waited behind the feeder."""
    at_level = [r for r in rows if r.level == level]
    chosen = at_level or list(rows)
    if not chosen:
        return None
    waited: dict[str, float] = {}
    held: dict[tuple[str, str, str], float] = {}
    for r in chosen:
        waited[r.waiter_group] = waited.get(r.waiter_group, 0.0) + r.wait_s
        key = (r.waiter_group, SCHEDULER if r.blocker == SCHEDULER_COMM else r.blocker_group or CATCH_ALL,
               r.blocker)
        held[key] = held.get(key, 0.0) + r.wait_s
    if waiter not in waited:
        waiter = min(waited, key=lambda g: (-waited[g], g))
    (_, layer, blocker), wait = min(((k, v) for k, v in held.items() if k[0] == waiter),
                                    key=lambda kv: (-kv[1], kv[0]))
    share = wait / waited[waiter] if waited[waiter] > 0 else 0.0
    levels = {r.level for r in chosen}
    return TopBlocker(waiter, blocker, layer, share, levels.pop() if len(levels) == 1 else None)
