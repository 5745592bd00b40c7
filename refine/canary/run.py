"""The canary's loop: windows with the profile and with the default scheduler, judged as it goes.

Problem: a profile measured in the lab meets other cores, neighbours and traffic on the host it
is meant for. The only judge of that is the host itself, with the service's real load, and the
test must not cost the service more than it has to: it must stop as soon as the answer is clear,
roll back on a regression at once, and never leave the host on a profile nobody judged.

Approach: windows alternate in ABBA blocks (profile, default, default, profile), so a linear
drift of the service's load cancels within a block and two profile visits in a row share one
attach. A visit may hold several windows (`windows_per_visit`): where an attach costs far more
than a window (30 s under TCG) that spends the attach on more pairs. After each switch a warm-up
passes, then the probe reads the window. A window counts only if sched_ext's state at its end is
the planned one (an ejected scheduler is a failed window, not the default's). The k-th window of
a visit pairs with the k-th of the visit it is paired with (0 with 1, 2 with 3); after every pair
the sequential judge (sequence.py) reads its bounds:
- worse beyond a margin: roll back (stop scx_layered, confirm sysfs reads `disabled`);
- better (the primary above 0, every secondary shown within its margin): keep, attached under
  the runtime's supervisor;
- no decision by `max_duration_s`: roll back, "no measurable benefit".
Guards that need no statistics: one profile window whose primary is worse than the default
window before it by more than `max_regression` rolls back at once; scx_layered exiting or being
ejected ends the canary (rolled back); SIGINT and SIGTERM roll back before the canary exits.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from threadwise.errors import MetricsError, ThreadwiseError
from threadwise.refine.canary import record
from threadwise.refine.canary.probe import Probe
from threadwise.refine.canary.sequence import Decision, Metric, Sequential
from threadwise.refine.measure.metrics import require
from threadwise.termination import StopRequest

if TYPE_CHECKING:
    import duckdb

PROFILE, DEFAULT = "profile", "default"
VISITS = (PROFILE, DEFAULT, DEFAULT, PROFILE)  # ABBA: visits 0 and 1 pair up, then 2 and 3


def block_plan(windows_per_visit: int) -> list[tuple[str, int, bool]]:
    """One block's windows as (arm, pair within the block, whether the window completes its pair):
    the k-th window of a visit pairs with the k-th window of the visit it is paired with."""
    plan = []
    for visit, arm in enumerate(VISITS):
        for k in range(windows_per_visit):
            plan.append((arm, (visit // 2) * windows_per_visit + k, visit % 2 == 1))
    return plan


class Outcome(StrEnum):
    KEPT = "kept"
    ROLLED_BACK = "rolled_back"
    NO_DECISION = "no_decision"
    INTERRUPTED = "interrupted"


class Switch(Protocol):
    """The scheduler under test: attach the profile (held by the canary: it ends if the canary
    dies), keep it (released to its supervisor), return to the kernel's default, read sysfs."""

    def attach(self) -> None: ...
    def keep(self) -> None: ...
    def detach(self) -> None: ...
    def state(self) -> str: ...  # sched_ext's sysfs state: 'enabled' while a scheduler runs
    def ended_why(self) -> str | None: ...  # why the profile's scheduler ended unasked, if known


@dataclass(frozen=True)
class Settings:
    metrics: tuple[Metric, ...]
    window_s: float
    warmup_s: float
    max_duration_s: float
    max_regression: float | None  # a ratio, 0.10 = 10%; None: off
    alpha: float
    clip_ratio: float
    windows_per_visit: int = 1


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    reason: str
    pairs: int
    windows: int
    seconds: float


def _busy_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _process_ticks(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])   # utime + stime of every thread


@dataclass(frozen=True)
class Reading:
    """One window as read: the probe's metrics (None: nothing usable), sched_ext's state at its
    end, whether that state is the planned one, why it does not count, other processes' CPU."""

    values: dict[str, float] | None
    state: str
    planned: bool
    note: str | None
    others_cpu_s: float
    t0: float
    t1: float

    @property
    def counted(self) -> dict[str, float] | None:
        """The metrics, if the window counts (read, and on the planned scheduler)."""
        return self.values if self.planned else None


def read_window(arm: str, switch: Switch, probe: Probe, settings: Settings, names: list[str], *,
                target_pid: int | None, clock: Callable[[], float],
                sleep: Callable[[float], None]) -> Reading:
    """Warm up, then one window of the probe; the scheduler's state is read at its end."""
    sleep(settings.warmup_s)
    busy0, _ = _busy_ticks()
    own0 = _process_ticks(target_pid)
    t0 = clock()
    values: dict[str, float] | None = None
    note = None
    try:
        probe.begin(settings.window_s)
    except MetricsError as bad:   # the start of the window could not be read: it will not count
        note = f"probe: {bad}"
    sleep(settings.window_s)
    if note is None:
        try:
            values = require(probe.end(), names, parser="probe")
        except ValueError as bad:   # MetricsError: the window read nothing usable
            note = f"probe: {bad}"
    t1 = clock()
    state = switch.state()
    planned = state == "enabled" if arm == PROFILE else state in ("", "disabled")
    if not planned:
        note = f"sched_ext read {state!r} at the window's end"
    others = (_busy_ticks()[0] - busy0 - (_process_ticks(target_pid) - own0)) / os.sysconf("SC_CLK_TCK")
    return Reading(values, state or "disabled", planned, note, max(0.0, others), t0, t1)


def regression(settings: Settings, primary: Metric, profile: dict[str, float],
               default: dict[str, float]) -> str | None:
    """The guard: why one profile window is past `max_regression` against the default's before it."""
    if settings.max_regression is None:
        return None
    ratio = profile[primary.name] / default[primary.name]
    loss = 1 / ratio if primary.higher_is_better else ratio
    if loss <= 1 + settings.max_regression:
        return None
    return (f"one window's {primary.name} was {loss:.2f}x worse than the default's before it "
            f"(--max-regression {settings.max_regression:.0%}): rolled back")


class _Trial:
    """One canary's state: what is attached, the windows and pairs so far, the open pairs."""

    def __init__(self, switch: Switch, settings: Settings, con: duckdb.DuckDBPyConnection,
                 progress: Callable[[str], None], clock: Callable[[], float]) -> None:
        self.switch, self.settings, self.con = switch, settings, con
        self.progress, self.clock = progress, clock
        self.judge = Sequential(settings.metrics, settings.alpha, clip_ratio=settings.clip_ratio)
        self.primary = next(m for m in settings.metrics if m.primary)
        self.names = [m.name for m in settings.metrics]
        self.cpus = os.cpu_count() or 1
        self.start = clock()
        self.attached = False
        self.windows = self.pairs = 0
        self.pending: dict[int, dict[str, dict[str, float] | None]] = {}   # pair -> arm -> values

    def finish(self, outcome: Outcome, reason: str) -> Result:
        if outcome is not Outcome.KEPT and self.attached:
            self.switch.detach()
            self.attached = False
        elif outcome is Outcome.KEPT:
            if not self.attached:
                self.switch.attach()
                self.attached = True
            self.switch.keep()
        record.finish(self.con, outcome.value, reason)
        self.progress(f"canary: {outcome.value}: {reason}")
        return Result(outcome, reason, self.pairs, self.windows, self.clock() - self.start)

    def out_of_time(self) -> bool:
        """Another window (with its warm-up) would end past max_duration_s."""
        s = self.settings
        return self.clock() - self.start + s.warmup_s + s.window_s > s.max_duration_s

    def switch_to(self, arm: str) -> Result | None:
        """Put `arm`'s scheduler in place; a Result when the profile could not attach."""
        if arm == PROFILE and not self.attached:
            try:
                self.switch.attach()
            except ThreadwiseError as failed:   # the runtime stopped what it started
                return self.finish(Outcome.ROLLED_BACK, f"scx_layered did not attach ({failed.message}): "
                                   "the default scheduler stays")
            self.attached = True
        elif arm == DEFAULT and self.attached:
            self.switch.detach()
            self.attached = False
        return None

    def recorded(self, arm: str, block: int, pair: int, got: Reading) -> Result | None:
        """Record the window; a Result when it ends the canary (the scheduler gone, the guard)."""
        record.add(self.con, "canary_window", [record.WindowRow(
            self.windows, block, pair, arm, got.t0 - self.start, got.t1 - self.start, got.state,
            got.others_cpu_s, self.cpus, got.counted is not None, got.note)])
        if got.values is not None:
            record.add(self.con, "sample", [record.SampleRow(self.windows, n, float(v))
                                            for n, v in got.values.items() if n in self.names])
        self.windows += 1
        if arm == PROFILE and not got.planned:
            # the kernel's or scx_layered's own words, so that an ejection (a stall, a BPF error)
            # is never read as the profile judged worse
            why = self.switch.ended_why()
            said = f"; scx_layered ended: {why}" if why else ""
            return self.finish(Outcome.ROLLED_BACK, f"the scheduler was not running in a profile window "
                                                    f"({got.note}{said}): rolled back")
        self.pending.setdefault(pair, {})[arm] = got.counted
        before = self.pending[pair].get(DEFAULT)
        if arm == PROFILE and got.counted is not None and before:
            guard = regression(self.settings, self.primary, got.counted, before)
            if guard is not None:
                return self.finish(Outcome.ROLLED_BACK, guard)
        return None

    def judged(self, pair: int) -> Result | None:
        """Add a completed pair to the judge and record its bounds; a Result once decided."""
        done = self.pending.pop(pair)
        a, b = done.get(PROFILE), done.get(DEFAULT)
        if a is None or b is None:
            self.progress(f"canary: pair {pair} left out (a window did not count)")
            return None
        added = self.judge.add_pair(a, b)
        self.pairs += 1
        decided = self.judge.decision()
        rows = [record.BoundRow(pair, bound.metric, bound.pairs, added[bound.metric], bound.mean,
                                bound.lower, bound.upper, decided.value) for bound in self.judge.bounds()]
        record.add(self.con, "bound", rows)
        self.progress(f"canary: pair {self.pairs}: " + "; ".join(
            f"{r.metric} {math.exp(r.mean):.3f}x [{math.exp(r.lower):.3f}, {math.exp(r.upper):.3f}]"
            for r in rows) + f" -> {decided.value}")
        if decided is Decision.WORSE:
            return self.finish(Outcome.ROLLED_BACK, f"worse beyond its margin after {self.pairs} pairs "
                               "(the confidence sequence excludes the margin): rolled back")
        if decided is Decision.BETTER:
            return self.finish(Outcome.KEPT, f"better after {self.pairs} pairs, no metric worse beyond its "
                               "margin: the profile stays applied")
        return None


def run_canary(switch: Switch, probe: Probe, settings: Settings, con: duckdb.DuckDBPyConnection, *,
               target_pid: int | None, progress: Callable[[str], None] = print,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Result:
    """Alternate windows until a decision, a guard or max_duration; always leave the host either
    judged-better on the profile or on the default scheduler. `con` is the open record."""
    trial = _Trial(switch, settings, con, progress, clock)
    plan = block_plan(settings.windows_per_visit)
    # SIGINT and SIGTERM roll back; kept as state too, the raise can be lost (termination.py)
    stop = StopRequest(KeyboardInterrupt)
    try:
        with stop.installed(signal.SIGINT, signal.SIGTERM):
            for block in itertools.count():
                for arm, in_block, completes in plan:
                    stop.check()
                    if trial.out_of_time():
                        return trial.finish(Outcome.NO_DECISION, f"no measurable benefit: no decision after "
                                            f"{trial.pairs} pairs in {settings.max_duration_s:g} s "
                                            "(rolled back)")
                    pair = 2 * settings.windows_per_visit * block + in_block
                    ended = trial.switch_to(arm)
                    stop.check()
                    if ended is None:
                        ended = trial.recorded(arm, block, pair, read_window(
                            arm, switch, probe, settings, trial.names, target_pid=target_pid, clock=clock,
                            sleep=sleep))
                    if ended is None and completes:
                        ended = trial.judged(pair)
                    if ended is not None:
                        return ended
    except KeyboardInterrupt as why:
        return trial.finish(Outcome.INTERRUPTED, f"{why}: rolled back to the default scheduler")
    except BaseException:
        if stop.signal is not None:   # the signal surfaced as another error (DuckDB's "Query interrupted")
            return trial.finish(Outcome.INTERRUPTED, f"{stop.signal}: rolled back to the default scheduler")
        if trial.attached:
            switch.detach()
        raise
    finally:
        probe.close()
    raise AssertionError("unreachable: the blocks never run out")
