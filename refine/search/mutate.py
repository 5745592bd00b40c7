"""Mutation operators: the small changes to a profile that refinement tries, each vetted.

Problem: refinement improves a profile one measured change at a time, so it
needs a deterministic list of small, named, reviewable changes to the current
best, and it must never spend a measurement (minutes in the lab) on a change
scx_layered would refuse, silently drop, or place badly.

Approach: an operator maps (profile, shape) to Candidates, each a whole new
profile with a name (`hot:treatment=batch`) and a sentence saying what
changed. Operators only produce schema-valid profiles (frozen pydantic models
changed with `model_copy(update=...)`, sizes kept in the schema's bounds) and
only changes that reach the compiled config:
- treatment: every other treatment for every group (a group made exclusive
  without any size gets one hot thread, and says so);
- hot_threads +-1 and cpu_fraction one whole core up or down, for exclusive
  groups (elsewhere they only change comments);
- slice_us halved and doubled, from the group's own value or the treatment's
  compiled default; weight x2 and /2 within scx_layered's bounds, for exclusive
  groups only (their Confined or Grouped layers share CPUs by weight; an Open
  layer's weight is never read by scx_layered 1.1.4's BPF, so a weight change
  there would spend a measurement on a change that does nothing);
- the scx_layered options that decide latency (`options.py`): a group's
  `preempt` on or off, `preempt_first` of a preempting Open layer, `protected`
  off and short slices for an exclusive group, the catch-all's slice and
  `preempt`;
- merge two adjacent groups of the same treatment and the same settings
  (patterns concatenated, evidence summed where sums mean something);
- join a group to the adjacent exclusive group on its cores (the exclusive
  group's settings and size; where a second exclusive group would not fit);
- split a multi-pattern group into one group per pattern (hot threads shared
  out by the recorded thread names each pattern matches);
- the reserve: a compile-time shape parameter, not part of the profile, so
  such a candidate carries `reserve_cores` and is compiled, linted and
  measured on the shape with that reserve.
`all_mutations` concatenates the operators in registry order and drops
candidates whose compiled config (comments aside) equals the parent's (those
would be measured as identical arms) or whose name came earlier. The search
(`guide.py`) reorders them by what the last ladder says failed.

Each candidate is vetted before it is measured (vetting.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from threadwise.refine.search.candidate import Candidate, replace_groups
from threadwise.refine.search.candidate import changed as _changed
from threadwise.refine.search.options import (
    catch_all_options,
    dropped_overrides,
    exclusive_slices,
    preempt_firsts,
    preemptible_owners,
    preempts,
    protections,
    scheduler_intervals,
    sharings,
)
from threadwise.shape import Shape
from threadwise.synthesize.api import (
    OPTION_KEYS,
    Evidence,
    Group,
    LayerSpec,
    Profile,
    Treatment,
    compiled_config,
    compiled_default,
    pattern_matches,
    scheduler_args,
    validation_errors,
    weight_bounds,
)

# --- candidates -----------------------------------------------------------------------------------


Operator = Callable[[Profile, Shape], list[Candidate]]


@dataclass(frozen=True)
class OperatorSpec:
    """One entry of the registry: an operator, or why it is not offered."""

    name: str
    summary: str
    apply: Operator | None
    skipped: str | None = None


def treatments(profile: Profile, shape: Shape) -> list[Candidate]:
    """Every other treatment for every group (dropping overrides the new treatment cannot keep)."""
    out = []
    for i, group in enumerate(profile.groups):
        for treatment in Treatment:
            if treatment is group.treatment:
                continue
            update: dict[str, Any] = {"treatment": treatment}
            note = ""
            if (treatment is Treatment.EXCLUSIVE
                    and group.model_copy(update=update).exclusive_cores() < 1):
                update["hot_threads"] = 1
                note = " (sized for 1 hot thread: it had none)"
            dropped = dropped_overrides(group, treatment)
            update.update(dict.fromkeys(dropped))
            note += f" ({', '.join(dropped)} dropped: not valid there)" if dropped else ""
            out.append(_changed(profile, i, f"{group.name}:treatment={treatment.value}",
                                f"group {group.name!r}: treatment {group.treatment.value} -> "
                                f"{treatment.value}{note}", **update))
    return out


def _sized_by_hot_threads(group: Group) -> bool:
    return group.treatment is Treatment.EXCLUSIVE and not group.request_millicores


def hot_threads(profile: Profile, shape: Shape) -> list[Candidate]:
    """hot_threads +1 and -1 (>= 1) for exclusive groups sized by hot threads."""
    out = []
    for i, group in enumerate(profile.groups):
        if not _sized_by_hot_threads(group):
            continue
        for step in (+1, -1):
            value = group.hot_threads + step
            if value < 1:
                continue
            out.append(_changed(profile, i, f"{group.name}:hot_threads={value}",
                                f"group {group.name!r}: hot_threads {group.hot_threads} -> "
                                f"{value}", hot_threads=value))
    return out


def _fraction_for(group: Group, cores: int) -> float | None:
    """A cpu_fraction in (0, 1] that sizes the exclusive group at exactly `cores` (short if possible)."""
    return group.fraction_for_cores(cores)


def cpu_fractions(profile: Profile, shape: Shape) -> list[Candidate]:
    """cpu_fraction set to give an exclusive group one whole core fewer, or one more."""
    out = []
    for i, group in enumerate(profile.groups):
        if group.treatment is not Treatment.EXCLUSIVE:
            continue
        cores = group.exclusive_cores()
        for target in (cores - 1, cores + 1):
            value = _fraction_for(group, target)
            if value is None or value == group.cpu_fraction:
                continue
            out.append(_changed(profile, i, f"{group.name}:cpu_fraction={value:g}",
                                f"group {group.name!r}: cpu_fraction {group.cpu_fraction:g} -> "
                                f"{value:g} ({cores} -> {target} exclusive cores)",
                                cpu_fraction=value))
    return out


def slices(profile: Profile, shape: Shape) -> list[Candidate]:
    """slice_us halved and doubled (from the group's value, or its treatment's default)."""
    out = []
    for i, group in enumerate(profile.groups):
        current = group.slice_us or compiled_default(group.treatment, "slice_us")
        for value, verb in ((current // 2, "halved"), (current * 2, "doubled")):
            if value < 1:
                continue
            out.append(_changed(profile, i, f"{group.name}:slice_us={value}",
                                f"group {group.name!r}: slice_us {current} -> {value} ({verb})",
                                slice_us=value))
    return out


def weights(profile: Profile, shape: Shape) -> list[Candidate]:
    """weight x2 and /2, clamped to scx_layered's bounds, when that changes it; exclusive groups
    only: 1.1.4 shares CPUs by weight among Confined and Grouped layers, and its BPF never reads
    an Open layer's weight (docs/profile-schema.md), so elsewhere the change would do nothing."""
    low, high = weight_bounds()
    out = []
    for i, group in enumerate(profile.groups):
        if group.treatment is not Treatment.EXCLUSIVE:
            continue
        current = group.weight or compiled_default(group.treatment, "weight")
        for value in (min(current * 2, high), max(current // 2, low)):
            if value == current:
                continue
            out.append(_changed(profile, i, f"{group.name}:weight={value}",
                                f"group {group.name!r}: weight {current} -> {value}",
                                weight=value))
    return out


# Groups merge only when they would compile alike: the same treatment, matchers' exclusions,
# sizing and every scx_layered option override (schema.OPTION_KEYS).
_MERGE_SAME = ("treatment", "exclude", "avg_runtime_us", "cpu_fraction", *OPTION_KEYS)


def _merged_evidence(a: Evidence | None, b: Evidence | None) -> Evidence | None:
    """What both groups' evidence says together (percentiles cannot be combined: dropped)."""
    if a is None or b is None:
        return a or b
    return Evidence(
        role=a.role if a.role == b.role else None,
        confidence=(min(a.confidence, b.confidence)
                    if a.confidence is not None and b.confidence is not None else None),
        threads=a.threads + b.threads, names=[*a.names, *b.names],
        cpu_share=a.cpu_share + b.cpu_share,
        max_thread_share=max(a.max_thread_share, b.max_thread_share),
        wakeups_per_s=a.wakeups_per_s + b.wakeups_per_s,
        in_wake_chain=a.in_wake_chain or b.in_wake_chain, separable=a.separable and b.separable,
    )


def merges(profile: Profile, shape: Shape) -> list[Candidate]:
    """Two adjacent groups of the same treatment and settings become one (patterns concatenated).

    Adjacent, so first-match order is unchanged. Groups whose excludes, runtime
    ranges or settings differ are not merged: one layer cannot keep both.
    """
    out = []
    for i in range(len(profile.groups) - 1):
        a, b = profile.groups[i], profile.groups[i + 1]
        if any(getattr(a, key) != getattr(b, key) for key in _MERGE_SAME):
            continue
        if (a.request_millicores is None) != (b.request_millicores is None):
            continue
        fused = _fused(profile, i, a, f"refine: groups {a.name!r} and {b.name!r} merged",
                       hot_threads=a.hot_threads + b.hot_threads,
                       request_millicores=(a.request_millicores + b.request_millicores
                                           if a.request_millicores and b.request_millicores else None))
        if fused is None:
            continue
        merged, candidate = fused
        out.append(Candidate(f"merge:{a.name}+{b.name}",
                             f"groups {a.name!r} and {b.name!r} ({a.treatment.value}) merged into "
                             f"{merged.name!r} with patterns {merged.match}", candidate))
    return out


def _fused(profile: Profile, i: int, base: Group, comment: str,
           **update: object) -> tuple[Group, Profile] | None:
    """Groups i and i+1 as one group (`base`'s settings with `update`; both groups' patterns and
    titles in order and their evidence together, named `a-b`), and the profile with it in their
    place; None when that name is too long or taken, or the profile does not validate (e.g. more
    patterns than one layer takes, or a title group fused with a comm group: `match` beside
    `title`). Adjacent, so first-match order is unchanged (merges, joins)."""
    a, b = profile.groups[i], profile.groups[i + 1]
    name = f"{a.name}-{b.name}"
    if len(name) > 64 or name in {g.name for g in profile.groups}:
        return None
    group = base.model_copy(update={
        "name": name, "match": list(dict.fromkeys([*a.match, *b.match])),
        "title": list(dict.fromkeys([*a.title, *b.title])), "comment": comment,
        "evidence": _merged_evidence(a.evidence, b.evidence), **update,
    })
    candidate = replace_groups(profile, i, i + 2, [group])
    return None if validation_errors(candidate) else (group, candidate)


def joins(profile: Profile, shape: Shape) -> list[Candidate]:
    """A group joins the adjacent exclusive group on its cores (one group, the exclusive one's
    settings and size, both groups' patterns in order).

    Why: where the exclusive budget holds one core, a second group cannot be made
    exclusive (lint: oversubscribed), yet its threads may be the ones that lose under
    background: Redis's main thread sat on the shared CPU behind the spinners and the
    generator while the exclusive core went to its I/O thread (blocker rows, 3.75 s of
    each 5-s window); the two in one exclusive group measured GET/s 1.43x and p99
    0.35x at bg=4 against the default scheduler (benchmarks/data/redis-exclusive-variants.duckdb,
    within that run's noise). Adjacent, so first-match order is unchanged; the joined
    group's own options go (the exclusive group's layer holds both); groups with
    excludes or runtime ranges are left alone (one layer cannot keep both).
    """
    out = []
    for i in range(len(profile.groups) - 1):
        a, b = profile.groups[i], profile.groups[i + 1]
        if (a.treatment is Treatment.EXCLUSIVE) == (b.treatment is Treatment.EXCLUSIVE):
            continue
        owner, guest = (a, b) if a.treatment is Treatment.EXCLUSIVE else (b, a)
        if guest.exclude or guest.avg_runtime_us is not None or guest.match == ["*"]:
            continue  # a catch-all pattern would take every thread onto the exclusive cores
        fused = _fused(profile, i, owner,
                       f"refine: group {guest.name!r} joins exclusive group {owner.name!r} on its cores")
        if fused is None:
            continue
        joined, candidate = fused
        out.append(Candidate(f"join:{guest.name}>{owner.name}",
                             f"group {guest.name!r} ({guest.treatment.value}) joins exclusive group "
                             f"{owner.name!r} on its {owner.exclusive_cores()} core(s): {joined.name!r} "
                             f"with patterns {joined.match}", candidate))
    return out


def _shares(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainder, ties to the first)."""
    if sum(weights) == 0:
        weights = [1] * len(weights)
    exact = [total * w / sum(weights) for w in weights]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda k: (shares[k] - exact[k], k))
    for k in order[: total - sum(shares)]:
        shares[k] += 1
    return shares


def splits(profile: Profile, shape: Shape) -> list[Candidate]:
    """A multi-pattern group becomes one group per pattern, in place and in pattern order.

    Hot threads are shared out by the recorded thread names each pattern
    matches (evenly without evidence). The parts keep the group's settings but
    not its evidence (its CPU shares and percentiles cannot be divided); their
    comment names the group they came from. An exclusive group sized by a
    pod's CPU request is not split (a request cannot be divided by pattern),
    nor is a split offered that would not validate (a part that would have no
    size, or be shadowed by an earlier part).
    """
    out = []
    names = {g.name for g in profile.groups}
    for i, group in enumerate(profile.groups):
        if len(group.match) < 2 or (group.treatment is Treatment.EXCLUSIVE
                                    and group.request_millicores):
            continue
        recorded = group.evidence.names if group.evidence else []
        matched = [sum(1 for n in recorded if pattern_matches(p, n)) for p in group.match]
        hot = _shares(group.hot_threads, matched)
        base = group.name[: 64 - len(f".{len(group.match)}")]
        parts = [group.model_copy(update={
            "name": f"{base}.{k + 1}", "match": [pattern], "hot_threads": hot[k],
            "comment": f"refine: pattern {k + 1} of group {group.name!r}, split out",
            "evidence": None,
        }) for k, pattern in enumerate(group.match)]
        if any(p.name in names - {group.name} for p in parts):
            continue
        candidate = replace_groups(profile, i, i + 1, parts)
        if validation_errors(candidate):
            continue
        out.append(Candidate(f"split:{group.name}",
                             f"group {group.name!r} split into "
                             + ", ".join(f"{p.name!r} ({p.match[0]})" for p in parts)
                             + (f"; hot threads {hot}" if group.hot_threads else ""),
                             candidate))
    return out


def reserves(profile: Profile, shape: Shape) -> list[Candidate]:
    """The shape's reserve -1 and +1 (kept below the core count), when an exclusive group exists."""
    if not any(g.treatment is Treatment.EXCLUSIVE for g in profile.groups):
        return []
    out = []
    for value in (shape.reserve_cores - 1, shape.reserve_cores + 1):
        if 0 <= value < shape.cores:
            out.append(Candidate(
                f"reserve_cores={value}",
                f"reserve {shape.reserve_cores} -> {value} cores for the system (compile-time "
                f"shape; exclusive budget {shape.exclusive_budget} -> {shape.cores - value} "
                "cores)", profile, reserve_cores=value))
    return out


OPERATORS: tuple[OperatorSpec, ...] = (
    OperatorSpec("treatment", "a group's treatment (exclusive, latency, batch, housekeeping, "
                 "default)", treatments),
    OperatorSpec("hot_threads", "hot_threads +-1 of an exclusive group", hot_threads),
    OperatorSpec("cpu_fraction", "cpu_fraction for one exclusive core fewer or more",
                 cpu_fractions),
    OperatorSpec("slice_us", "slice_us halved or doubled", slices),
    OperatorSpec("weight", "weight x2 or /2 of an exclusive group (Open layers never read it)",
                 weights),
    OperatorSpec("preempt", "a group's preempt on or off", preempts),
    OperatorSpec("preempt_first", "preempt_first on or off for a preempting Open layer",
                 preempt_firsts),
    OperatorSpec("preemptible", "an exclusive group's CPUs preemptible by waking latency threads "
                 "(protected off, disallow_preempt_after_us never)", preemptible_owners),
    OperatorSpec("protected", "protected off for an exclusive group's Confined layer", protections),
    OperatorSpec("exclusive", "exclusive off for an exclusive group's Confined layer", sharings),
    OperatorSpec("exclusive_slice", "slice_us 1000 or 2000 for an exclusive group",
                 exclusive_slices),
    OperatorSpec("catch_all", "the catch-all's slice_us (halved, 2000) and preempt",
                 catch_all_options),
    OperatorSpec("scheduler", "scx_layered's --interval (the [scheduler] table): 1 s or 10 s",
                 scheduler_intervals),
    OperatorSpec("merge", "two adjacent groups of the same treatment merged", merges),
    OperatorSpec("join", "a group joins the adjacent exclusive group on its cores", joins),
    OperatorSpec("split", "a multi-pattern group split by pattern", splits),
    OperatorSpec("reserve", "the shape's reserved cores +-1 (compile-time)", reserves),
)


def _key(profile: Profile, shape: Shape) -> tuple[tuple[LayerSpec, ...], tuple[str, ...]] | None:
    """The compiled layers of a valid profile without comments (which name it and explain
    demotions) and its scx_layered flags; None when the profile does not validate."""
    if validation_errors(profile):
        return None
    layers = tuple(dataclasses.replace(spec, comment=None) for spec in compiled_config(profile, shape)[0])
    return layers, scheduler_args(profile)


def mutations_by_operator(profile: Profile, shape: Shape) -> dict[str, list[Candidate]]:
    """Every operator's candidates, by operator name in registry order, without those that change
    nothing compiled and without a name an earlier operator gave already."""
    parent = _key(profile, shape)
    out: dict[str, list[Candidate]] = {}
    names: set[str] = set()
    for spec in OPERATORS:
        if spec.apply is None:
            continue
        for candidate in spec.apply(profile, shape):
            if candidate.name in names:
                continue
            if parent is None or _key(candidate.profile, candidate.shape_for(shape)) != parent:
                out.setdefault(spec.name, []).append(candidate)
                names.add(candidate.name)
    return out


def all_mutations(profile: Profile, shape: Shape) -> list[Candidate]:
    """Every operator's candidates, in registry order, without those that change nothing compiled."""
    return [c for found in mutations_by_operator(profile, shape).values() for c in found]
