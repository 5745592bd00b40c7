"""The guided search: the next candidates ordered by what can fix the last ladder's failures.

Problem: `all_mutations` offers some fifty candidates in registry order (every
treatment swap first) and the lab affords a handful of 4-minute steps. The
diagnosis (diagnose.py) names what failed; the search should first try the
changes that can fix it, and say so in the record.

Approach: each candidate is compared with its parent (`touched`: which
layers, and which keys of each, it changes; a reserve change touches the
pseudo-layer `(reserve)`). For the failures in the diagnosis's order (its
margins last: metrics within noise on the bad side), one pass per remedy
(diagnose.Remedy; the worst failure of each remedy speaks for it) aims each
untried candidate at it, or not; a candidate keeps its best aim. The
aimed candidates are placed by tier, then pass, then rank, then registry
order, so that what can fix any failure (tier 0) goes before what merely
changes the top blocker's layer (tier 1): in the retrain of 2026-11-24 the
latency pass's tier-1 treatment swaps of hot took the steps a confinement
remedy needed. The remedies:
- latency (a lower-is-better metric worse, e.g. worker_lat_p99_us at bg=0):
  the options (never a treatment) of layers that can hold a CPU when the
  latency group wakes, changed in the direction that frees it, ranked as
  listed: an exclusive group's `preempt` off (a preempting task is never
  preempted), a shorter `slice_us` (unless its CPUs are already preemptible
  at any time and the waiter preempts: it takes them whatever the slice), its
  CPUs made preemptible at any time
  (`protected` off with `disallow_preempt_after_us` never), `protected` off
  (its CPUs run nothing else); the catch-all's shorter `slice_us`, its `preempt` off; the latency
  groups' own `preempt` (either way: two preempting layers cannot preempt
  each other; once blocker rows name the group that waited: on for it, off
  for the others) and its `preempt_first` on. A longer slice or a holder
  made to preempt is no remedy. With blocker rows for the failing level (or
  any level), candidates that touch the top blocker's layer (its group; the
  catch-all when it had none) go first, except that when that layer is a
  preempting latency group (which the waiter, preempting too, can never
  preempt) a change that gives the waiter another CPU it may take (an exclusive
  group's CPUs made preemptible) goes before it;
  then a remedy of that layer, or its
  shorter slice or preempt off whatever its treatment (tier 0), then any
  other change of that layer (tier 1; its options before its treatment,
  a smaller step); the other remedies follow (tier 2);
- capacity (a higher-is-better metric worse, or the primary better nowhere
  under background): the CPU the groups own, either way: a group made
  exclusive, an exclusive group's `hot_threads` or `cpu_fraction`, a group
  joined to an exclusive group on its cores (where a second exclusive group
  does not fit), the reserve;
- confinement (a rate worse with no background, diagnose.py): the exclusive
  group's ownership loosened, ranked: its CPUs preemptible at any time,
  unprotected, then, once they are preemptible, a longer `slice_us` (its own
  thread re-dispatched less often on a CPU waiters take anyway: measured on
  rolesim's trained profile at 5 repeats, hot at bg=0 0.928x the default's
  with the 2 ms preset, 0.946x / 0.948x with 4 / 20 ms, the worker p99 within
  noise, docs/profile-schema.md), then `exclusive` off (it idles only SMT
  siblings: no difference measured on the lab's SMT-less vCPUs).
- reporter (windows with no report line from a self-reporting service,
  diagnose.Kind.SILENT; its failures come first): the service's reporting
  thread gets a CPU. Which thread reports is not traced; the suspect is the
  process's main thread (named as the process: `java`, `python3`), in the
  first group that matches that name, else the catch-all. scx_layered 1.1.4
  dispatches a CPU's Open layers in a fixed order, shuffled per CPU once at
  start (main.rs, `on_layer_order`), preempting layers before all others
  (main.bpf.c `layered_dispatch`): a non-preempting layer served after one
  whose threads never stop running (spinners in the catch-all, a busy
  pool) gets that CPU only from the anti-stall path. Weight and slice do not
  change that order, so a treatment change that raises the reporter's group
  is the one to `latency` (a preempting layer, served first) from
  housekeeping, batch or default: the
  reporter's group first, or the catch-all made preempting when it holds
  the main thread, then another such group. A
  holder's shorter slice or lost preempt is no remedy here: the freed CPU
  goes to the first layer in that order with work, not to the reporter.
  Where it came
  from: poolservice's main thread in `housekeeping` beside two busy request
  threads printed no line in 6 of its windows under background (2026-11-28).
Candidates no failure points to keep registry order after the targeted
ones. Every Choice carries the sentence the step records (`chosen_because`):
the failure, why the change can act on it, and the top blocker when known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from threadwise.refine.search.candidate import Candidate
from threadwise.refine.search.diagnose import (
    CATCH_ALL,
    SCHEDULER,
    Blocker,
    Failure,
    Remedy,
    TopBlocker,
    metric_group,
    top_blocker,
)
from threadwise.synthesize.api import (
    MAX_US,
    CatchAll,
    Group,
    Profile,
    Treatment,
    effective,
    pattern_matches,
    scheduler_interval_ms,
)

RESERVE = "(reserve)"  # the pseudo-layer a compile-time reserve change touches
# SCHEDULER (diagnose.py): the pseudo-layer a [scheduler] change touches (scx_layered's flags)
_IGNORED = frozenset({"comment", "evidence"})  # fields that change no layer
_OTHER_HOLDER = 7  # rank of a shorter slice / preempt off on a layer the list above leaves out
# the option keys a latency remedy may change (a treatment change is more than an option: it moves
# the group to another layer kind; it counts only as a change of the top blocker's layer)
_LATENCY_KEYS = frozenset({"slice_us", "preempt", "preempt_first", "protected", "disallow_preempt_after_us"})
# the option keys a confinement remedy may change (how much an exclusive group owns its CPUs)
_OWNERSHIP_KEYS = frozenset({"protected", "exclusive", "disallow_preempt_after_us"})
Aim = tuple[int, int, str]  # (tier, rank, reason)


@dataclass(frozen=True)
class Choice:
    """A candidate in search order, and why it is there."""

    candidate: Candidate
    because: str


def touched(parent: Profile, candidate: Candidate) -> dict[str, frozenset[str]]:
    """Layer name -> the keys the candidate changes in it (`group`: the layer is new or gone)."""
    before = {g.name: g for g in parent.groups}
    after = {g.name: g for g in candidate.profile.groups}
    out: dict[str, frozenset[str]] = {}
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            out[name] = frozenset({"group"})
            continue
        keys = frozenset(k for k in Group.model_fields
                         if k not in _IGNORED and getattr(old, k) != getattr(new, k))
        if keys:
            out[name] = keys
    old_all, new_all = parent.catch_all or CatchAll(), candidate.profile.catch_all or CatchAll()
    keys = frozenset(k for k in CatchAll.model_fields if getattr(old_all, k) != getattr(new_all, k))
    if keys:
        out[CATCH_ALL] = keys
    if candidate.reserve_cores is not None:
        out[RESERVE] = frozenset({"reserve_cores"})
    if parent.scheduler != candidate.profile.scheduler:
        out[SCHEDULER] = frozenset({"interval_ms"})
    return out


def _opens(old: Group, new: Group) -> bool:
    """Whether the change makes an exclusive group's CPUs preemptible at any time (options.py
    `preemptible_owners`): unprotected, and disallow_preempt_after_us raised to "never"."""
    return _open(new) and old.disallow_preempt_after_us != MAX_US


def _open(group: Group) -> bool:
    """Whether an exclusive group's CPUs are preemptible at any time (see `_opens`)."""
    return not effective(group, "protected") and group.disallow_preempt_after_us == MAX_US


def _preempts(profile: Profile, layer: str | None) -> bool:
    """Whether `layer` is a group whose layer preempts (False when unknown)."""
    group = _layer_item(profile, layer) if layer is not None else None
    return isinstance(group, Group) and bool(effective(group, "preempt"))


def _preempting_latency(parent: Profile, layer: str) -> bool:
    """Whether `layer` is a latency group whose layer preempts (a waiter of another preempting
    layer cannot preempt it: try_preempt_cpu skips a CPU whose task preempts)."""
    group = _layer_item(parent, layer)
    return (isinstance(group, Group) and group.treatment is Treatment.LATENCY
            and bool(effective(group, "preempt")))


def _frees_cpu(layer: str, old: Group | CatchAll, new: Group | CatchAll, waiter: str,
               waiter_group: str | None, *, waiter_preempts: bool) -> tuple[int, str] | None:
    """(rank, why) when the change frees a CPU `waiter` wants sooner (None: it does not);
    `waiter_group` is the group that waited, when blocker rows name it."""
    shorter = effective(new, "slice_us") < effective(old, "slice_us")
    stops = bool(effective(old, "preempt")) and not effective(new, "preempt")
    if isinstance(old, CatchAll):
        if shorter:
            return 3, f"catch-all slice can hold the CPU when {waiter} wakes"
        if stops:
            return 4, f"a preempting catch-all is not preempted when {waiter} wakes"
        return None
    if old.treatment is Treatment.EXCLUSIVE and isinstance(new, Group):
        if stops:
            return 0, f"{layer}'s preempt: a preempting exclusive task is not preempted when {waiter} wakes"
        if shorter and not (_open(old) and waiter_preempts):
            return 1, f"{layer}'s slice is how long its task keeps a CPU when {waiter} wakes"
        if _opens(old, new):
            return 2, (f"{layer}'s CPUs: protected, or busy past disallow_preempt_after_us, they are "
                       f"never preempted for {waiter}")
        if effective(old, "protected") and not effective(new, "protected"):
            return 2, f"{layer}'s protected CPUs never run {waiter}'s threads"
        return None
    if old.treatment is Treatment.LATENCY and isinstance(new, Group):
        starts = not effective(old, "preempt") and bool(effective(new, "preempt"))
        if waiter_group is None and (starts or stops):
            return 5, (f"{layer}'s own preempt decides whether its waking thread may take a busy CPU "
                       "(two preempting layers cannot preempt each other)")
        if layer == waiter_group and starts:
            return 5, f"{layer}'s own preempt lets its waking thread take a busy CPU"
        if waiter_group is not None and layer != waiter_group and stops:
            return 5, (f"{layer}'s preempt: two preempting layers cannot preempt each other, so "
                       f"{waiter} cannot take a CPU from it")
        if (waiter_group in (None, layer) and effective(new, "preempt_first")
                and not effective(old, "preempt_first")):
            return 6, f"{layer}'s preempt_first sends its waking thread to its previous CPU first"
        return None
    if shorter or stops:
        what = "slice" if shorter else "preempt"
        return _OTHER_HOLDER, f"{layer}'s {what} can hold the CPU when {waiter} wakes"
    return None


def _layer_item(profile: Profile, layer: str) -> Group | CatchAll | None:
    if layer == CATCH_ALL:
        return profile.catch_all or CatchAll()
    return next((g for g in profile.groups if g.name == layer), None)


def _latency_aim(parent: Profile, candidate: Candidate, changes: dict[str, frozenset[str]],
                 top: TopBlocker | None) -> Aim | None:
    """(tier, rank, reason) of a candidate for a latency failure, or None."""
    if top is not None:
        waiter = top.waiter_group
    else:
        names = [g.name for g in parent.groups if g.treatment is Treatment.LATENCY]
        waiter = " or ".join(names) if names else "the latency threads"
    aims: list[Aim] = []
    for layer, keys in changes.items():
        if layer == SCHEDULER:
            longer = scheduler_interval_ms(candidate.profile) > scheduler_interval_ms(parent)
            why = f"scx_layered's userspace step runs ahead of every layer while {waiter} waits"
            if top is not None and top.layer == SCHEDULER:
                aims.append((0, 0, why) if longer else (1, 0, "changes the top blocker's step"))
            elif longer:
                aims.append((0 if top is None else 2, _OTHER_HOLDER - 1, why))
            continue
        old, new = _layer_item(parent, layer), _layer_item(candidate.profile, layer)
        waiter_group = top.waiter_group if top is not None else None
        frees = (_frees_cpu(layer, old, new, waiter, waiter_group,
                            waiter_preempts=_preempts(parent, waiter_group))
                 if old is not None and new is not None and keys <= _LATENCY_KEYS else None)
        if (top is not None and top.layer != layer and _preempting_latency(parent, top.layer)
                and isinstance(old, Group) and isinstance(new, Group) and _opens(old, new)):
            # the waiter queued behind a preempting latency layer, which no waking thread preempts:
            # first a CPU it may take (rolesim: turning the feeder's preempt off instead left the
            # feeder behind the spinners, worker p99 4-10 ms at every level; docs/profile-schema.md)
            aims.append((0, -1, f"{top.waiter_group} cannot preempt {top.layer} (both preempt); "
                                f"{layer}'s CPUs become ones it may take"))
        elif top is not None and layer == top.layer:
            aims.append((0, frees[0], frees[1]) if frees is not None
                        else (1, int("treatment" in keys), f"changes {layer}, the top blocker's layer"))
        elif frees is not None and frees[0] < _OTHER_HOLDER:
            aims.append((0 if top is None else 2, *frees))
    return min(aims, default=None)


def _joined(parent: Profile, candidate: Candidate,
            changes: dict[str, frozenset[str]]) -> tuple[str, str] | None:
    """(guest, owner) when the candidate joins a group to an exclusive one (mutate.joins: both
    layers gone, one new exclusive group holding both groups' patterns), else None."""
    gone = [name for name, keys in changes.items() if keys == {"group"} and _layer_item(parent, name)]
    made = [_layer_item(candidate.profile, name) for name, keys in changes.items()
            if keys == {"group"} and _layer_item(parent, name) is None]
    if len(gone) != 2 or len(made) != 1 or not isinstance(made[0], Group):
        return None
    olds = [g for g in parent.groups if g.name in gone]
    owners = [g for g in olds if g.treatment is Treatment.EXCLUSIVE]
    if made[0].treatment is not Treatment.EXCLUSIVE or len(owners) != 1:
        return None
    guest = next(g for g in olds if g is not owners[0])
    return guest.name, owners[0].name


def _capacity_aim(parent: Profile, candidate: Candidate, changes: dict[str, frozenset[str]]) -> Aim | None:
    """(tier, rank, reason) of a candidate for a primary that lost or gained nothing, or None."""
    joined = _joined(parent, candidate, changes)
    if joined is not None:
        guest, owner = joined
        return 0, 1, f"{guest} joins {owner}'s exclusive cores against the background"
    for layer, keys in changes.items():
        if layer == RESERVE:
            return 0, 2, "the reserve decides how many cores the exclusive groups get"
        old, new = _layer_item(parent, layer), _layer_item(candidate.profile, layer)
        if not isinstance(old, Group) or not isinstance(new, Group):
            continue
        if "treatment" in keys and new.treatment is Treatment.EXCLUSIVE:
            return 0, 0, f"{layer} made exclusive: cores of its own against the background"
        if old.treatment is new.treatment is Treatment.EXCLUSIVE and keys & {"cpu_fraction", "hot_threads"}:
            return 0, 1, f"{layer}'s exclusive cores decide what its threads keep under background"
    return None


def _confinement_aim(parent: Profile, candidate: Candidate, changes: dict[str, frozenset[str]]) -> Aim | None:
    """(tier, rank, reason) of a candidate for a rate lost with no background, or None: the
    exclusive group's ownership loosened (measured on rolesim at bg=0: hot 0.75x under the preset,
    0.89-0.97x with its CPUs unprotected, preemptible or not exclusive, 0.99x with no layer)."""
    for layer, keys in changes.items():
        old, new = _layer_item(parent, layer), _layer_item(candidate.profile, layer)
        if not isinstance(old, Group) or not isinstance(new, Group):
            continue
        if old.treatment is not Treatment.EXCLUSIVE:
            continue
        if keys == {"slice_us"} and _open(old) and effective(new, "slice_us") > effective(old, "slice_us"):
            return 0, 2, (f"{layer}'s longer slice: its CPUs preemptible, waiters take them anyway, "
                          "and its own thread is re-dispatched less often with no background")
        if not keys <= _OWNERSHIP_KEYS:
            continue
        if _opens(old, new):
            return 0, 0, f"{layer}'s CPUs preemptible: owning them costs its threads with no background"
        if effective(old, "protected") and not effective(new, "protected"):
            return 0, 1, f"{layer}'s CPUs unprotected: owning them costs its threads with no background"
        if effective(old, "exclusive") and not effective(new, "exclusive"):
            return 0, 3, f"{layer} not exclusive: owning its cores costs its threads with no background"
    return None


_OPEN_PLAIN = (Treatment.HOUSEKEEPING, Treatment.BATCH, Treatment.DEFAULT)  # Open, not preempting


def reporter_layer(profile: Profile) -> str:
    """The layer of the process's main thread (its comm is the process's name), the suspect when a
    self-reporting service is silent: the first group with a matching pattern and no matching
    exclusion, else the catch-all. A group narrowed by uid or runtime is not assumed to take it."""
    process = profile.workload.process
    if process is not None:
        for group in profile.groups:
            if group.uid is not None or group.avg_runtime_us is not None:
                continue
            if (any(pattern_matches(p, process) for p in group.match)
                    and not any(pattern_matches(p, process) for p in group.exclude)):
                return group.name
    return CATCH_ALL


def _reporter_aim(parent: Profile, candidate: Candidate, changes: dict[str, frozenset[str]]) -> Aim | None:
    """(tier, rank, reason) of a candidate for a silent service (Kind.SILENT), or None: a layer
    that may hold the reporter made preempting (the module's note)."""
    reporter = reporter_layer(parent)
    aims: list[Aim] = []
    for layer, keys in changes.items():
        old, new = _layer_item(parent, layer), _layer_item(candidate.profile, layer)
        holds = ("holds the main thread, the likely reporter" if layer == reporter
                 else "may hold the reporter")
        why = f"{layer} {holds}: a preempting layer is dispatched before every non-preempting one"
        if isinstance(old, Group) and isinstance(new, Group):
            # default, batch and housekeeping differ in slice and weight, which leave the order as is
            if ("treatment" in keys and old.treatment in _OPEN_PLAIN and not effective(old, "preempt")
                    and new.treatment is Treatment.LATENCY):
                aims.append((0, 0 if layer == reporter else 2, why))
        elif (layer == reporter and isinstance(old, CatchAll) and isinstance(new, CatchAll)
              and keys == {"preempt"} and not effective(old, "preempt") and effective(new, "preempt")):
            aims.append((0, 0, why))  # no group takes the main thread
    return min(aims, default=None)


def order(parent: Profile, pool: Sequence[Candidate], failures: Sequence[Failure],
          blockers: Sequence[Blocker] = ()) -> list[Choice]:
    """`pool` in search order, each with why (see the module's note). Pure and deterministic."""
    aimed: dict[int, tuple[tuple[int, int, int, int], str]] = {}  # index -> (sort key, because)
    changes = [touched(parent, c) for c in pool]
    remedies: list[Remedy] = []
    for failure in failures:
        if failure.remedy in remedies:
            continue
        remedies.append(failure.remedy)
        turn = len(remedies)
        top: TopBlocker | None = None
        if failure.remedy is Remedy.LATENCY:
            about = metric_group(failure.metric, (g.name for g in parent.groups))
            top = top_blocker(blockers, failure.level, about)
        note = f"; {top.describe()}" if top is not None else ""
        for index, candidate in enumerate(pool):
            if failure.remedy is Remedy.LATENCY:
                aim = _latency_aim(parent, candidate, changes[index], top)
            elif failure.remedy is Remedy.CONFINEMENT:
                aim = _confinement_aim(parent, candidate, changes[index])
            elif failure.remedy is Remedy.REPORTER:
                aim = _reporter_aim(parent, candidate, changes[index])
            else:
                aim = _capacity_aim(parent, candidate, changes[index])
            key = (aim[0], turn, aim[1], index) if aim is not None else None
            if key is not None and (index not in aimed or key < aimed[index][0]):
                aimed[index] = (key, f"{failure.describe()}: {aim[2]}{note}")
    placed = {index: Choice(pool[index], because)
              for index, (_key, because) in sorted(aimed.items(), key=lambda kv: kv[1][0])}
    if failures:
        untargeted = (f"untargeted, registry order after the {len(placed)} candidates aimed at the "
                      f"failures (worst: {failures[0].describe()})")
    else:
        untargeted = ("registry order: no failure to aim at (against the baseline the best is worse "
                      "nowhere, its primary better somewhere, and no metric on the bad side of noise)")
    return [*placed.values(), *(Choice(c, untargeted) for i, c in enumerate(pool) if i not in placed)]
