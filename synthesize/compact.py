"""Compact a profile: few groups, each one a decision a reviewer can check.

Problem: analysis gives one group per name pattern. A real service (a JVM
with named pools) has twenty: eight idle JVM internals, each its own layer
with a name the kernel cut mid-word (`VM-Periodic-Tas`), hide the three
decisions that matter, and a service with a few more pools does not fit
scx_layered's 16 layers at all.

Approach, on the groups `build.py` made (in profile order), before `fit.py`:
1. fold: a group that used no measurable CPU (< `IDLE_CPU_SHARE` CPUs) and
   sits on no busy wake chain has nothing to schedule: it goes to the
   workload's own catch-all, the last group, `match = ["*"]` (every other
   thread of the process; `default` treatment).
2. merge: two groups with the same treatment merge into one group with both
   patterns when nothing in the evidence sets them apart (`apart`: a
   different role, different option overrides (a poller's `preempt =
   false`), one on a wake chain and the other not, one with hot
   threads and the other without, a behaviour split
   or carve-out, exclusive sizing, or, when both use measurable CPU, slices
   or per-thread CPU that differ by `APART_RATIO` or more).
3. budget: while the groups (catch-all included) exceed `max_groups`, the
   closest same-treatment pair merges anyway, then the smallest non-exclusive
   group folds into the catch-all.
Every fold and merge is written into the receiving group's `comment`, with
the numbers that decided it; evidence of a merged group is the sum (threads,
CPU, wakeups) or the worst case (p99s, busiest thread) of its parts. Names
are readable words: a space-separated name the kernel cut at 15 bytes loses
its last, partial word (`VM Periodic Tas` -> `VM-Periodic`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from threadwise.synthesize.families import family_decided
from threadwise.synthesize.patterns import WORKLOAD_REST, prefix_of
from threadwise.synthesize.presets import overrides
from threadwise.synthesize.schema import Evidence, Group, Treatment

IDLE_CPU_SHARE = 0.001   # CPUs: below 1 ms per second a group has nothing to schedule
MEASURABLE_SHARE = 0.01  # CPUs: below this, slice and share differences are noise
APART_RATIO = 3.0        # slices or per-thread CPU this far apart tell two groups apart
DEFAULT_MAX_GROUPS = 6
REST_NAME = "other"
KERNEL_COMM_BYTES = 15


@dataclass(frozen=True)
class Compacted:
    """The compacted groups (profile order, catch-all last) and one line per decision."""

    groups: list[Group]
    decisions: list[str]
    merged: int = 0   # analysis groups that went into a merged group
    folded: int = 0   # analysis groups folded into the workload's catch-all


def _share(group: Group) -> float:
    return group.evidence.cpu_share if group.evidence else 0.0


def describe(group: Group) -> str:
    """A group and the numbers that decide its fate, for a comment."""
    ev = group.evidence
    selectors = group.match or group.title
    label = ", ".join(selectors) if len(selectors) > 1 else selectors[0]
    if ev is None:
        return f"{label} ({group.treatment.value}, no evidence)"
    parts = [group.treatment.value, f"{ev.threads} thr", f"{ev.cpu_share:.2g} CPUs",
             f"{ev.wakeups_per_s:.3g} wakeups/s"]
    if ev.slice_p50_us is not None and ev.cpu_share >= IDLE_CPU_SHARE:
        parts.append(f"slice p50 {ev.slice_p50_us:.0f} us")
    if ev.in_wake_chain:
        parts.append("wake chain")
    if group.family:
        parts.append(f"family {group.family}")
    return f"{label} ({', '.join(parts)})"


def idle_reason(group: Group) -> str | None:
    """Why a group has nothing to schedule (fold it), or None."""
    ev = group.evidence
    if (ev is None or group.treatment is Treatment.EXCLUSIVE or group.avg_runtime_us is not None
            or group.uid is not None or group.title):   # a behaviour or title split: the analysis's decision
        return None
    if family_decided(group):
        return None   # idle here, but a known family gave it a treatment: it keeps a layer
    if ev.cpu_share < IDLE_CPU_SHARE and not ev.in_wake_chain:
        return f"< {IDLE_CPU_SHARE:g} CPUs and on no wake chain"
    return None


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or a <= 0 or b <= 0:
        return 1.0
    return max(a, b) / min(a, b)


def apart(a: Group, b: Group) -> str | None:
    """What in the evidence tells two groups apart (None: nothing, they may merge)."""
    if a.treatment is not b.treatment:
        return "different treatments"
    if overrides(a) != overrides(b):
        return "different option overrides"
    if Treatment.EXCLUSIVE in (a.treatment, b.treatment):
        return "exclusive groups are sized one by one"
    if a.avg_runtime_us or b.avg_runtime_us or a.exclude or b.exclude:
        return "behaviour split or carve-out"
    if a.uid is not None or b.uid is not None:
        return "selected by user (UIDEquals)"
    if a.title or b.title:
        return "selected by title (HintEquals)"
    if WORKLOAD_REST in a.match or WORKLOAD_REST in b.match:
        return "catch-all"
    ea, eb = a.evidence, b.evidence
    if ea is None or eb is None:
        return "no evidence"
    if ea.role != eb.role:
        return f"roles {ea.role} and {eb.role}"
    if ea.in_wake_chain != eb.in_wake_chain:
        return "one is on a wake chain"
    if (a.hot_threads > 0) != (b.hot_threads > 0):
        return "one has hot threads"
    if min(ea.cpu_share, eb.cpu_share) >= MEASURABLE_SHARE:
        if _ratio(ea.slice_p50_us, eb.slice_p50_us) >= APART_RATIO:
            return f"slice p50 {ea.slice_p50_us:.0f} vs {eb.slice_p50_us:.0f} us"
        per_a, per_b = ea.cpu_share / max(ea.threads, 1), eb.cpu_share / max(eb.threads, 1)
        if _ratio(per_a, per_b) >= APART_RATIO:
            return f"CPU per thread {per_a:.3g} vs {per_b:.3g}"
    return None


def _sum_evidence(parts: Sequence[Evidence | None]) -> Evidence | None:
    found = [e for e in parts if e is not None]
    if not found:
        return None
    main = max(found, key=lambda e: (e.cpu_share, e.threads))

    def worst(field: str) -> float | None:
        values = [getattr(e, field) for e in found if getattr(e, field) is not None]
        return max(values) if values else None

    roles = {e.role for e in found}
    confidences = [e.confidence for e in found if e.confidence is not None]
    return Evidence(
        role=roles.pop() if len(roles) == 1 else None,
        confidence=min(confidences) if confidences and len(roles) <= 1 else None,
        threads=sum(e.threads for e in found),
        names=sorted({n for e in found for n in e.names}),
        cpu_share=float(f"{sum(e.cpu_share for e in found):.4g}"),
        max_thread_share=max(e.max_thread_share for e in found),
        wakeups_per_s=float(f"{sum(e.wakeups_per_s for e in found):.4g}"),
        slice_p50_us=main.slice_p50_us, slice_p99_us=worst("slice_p99_us"),
        rq_latency_p50_us=main.rq_latency_p50_us, rq_latency_p99_us=worst("rq_latency_p99_us"),
        in_wake_chain=any(e.in_wake_chain for e in found),
        separable=all(e.separable for e in found),
    )


def readable_name(pattern: str) -> str:
    """A layer name of whole words from a pattern (a kernel-cut last word is dropped)."""
    body = prefix_of(pattern)
    if len(body.encode("utf-8")) >= KERNEL_COMM_BYTES and " " in body:
        # words separated by spaces (JVM, Python thread names) run past the kernel's 15
        # bytes and lose their end: `VM Periodic Tas` is `VM Periodic Task`, so drop `Tas`.
        # `jemalloc_bg_thd` (C-style, 15 bytes) is taken as whole.
        body = re.sub(r"[A-Za-z0-9]+$", "", body)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", body).strip("-_.")[:60].strip("-_.")
    return name or "group"


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 2
    while name in taken or name == "rest":
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def _merged_name(parts: Sequence[Group], taken: set[str]) -> str:
    families = {p.family for p in parts}
    if len(families) == 1 and None not in families:
        return _unique(str(families.pop()), taken)
    if len(parts) == 2:
        base = f"{parts[0].name}-and-{parts[1].name}"
        if len(base) <= 40:
            return _unique(base, taken)
    return _unique(parts[0].treatment.value, taken)


def _own_notes(comment: str) -> list[str]:
    """A part's notes worth keeping in a merge: its comment, or, for a group merged before, the
    notes its own parts brought (its header and part lines are said again by the new merge)."""
    if not comment.startswith("merged: "):
        return [comment]
    return [line for line in comment.splitlines()[1:] if not line.startswith("  ")]


def _merge(parts: Sequence[Group], taken: set[str], why: str) -> Group:
    """One group with every part's patterns (order kept), evidence summed, comment why."""
    for part in parts:
        taken.discard(part.name)
    name = _merged_name(parts, taken)
    note = f"merged: {why}\n" + "\n".join(f"  {describe(p)}" for p in parts)
    earlier = [line for p in parts if p.comment for line in _own_notes(p.comment)]
    return Group(
        **overrides(parts[0]),   # the same in every part: `apart` and `_closest_pair` see to it
        name=name, match=list(dict.fromkeys(m for p in parts for m in p.match)),
        treatment=parts[0].treatment,
        family=parts[0].family if len({p.family for p in parts}) == 1 else None,
        hot_threads=sum(p.hot_threads for p in parts),
        comment="\n".join([note, *earlier]),
        evidence=_sum_evidence([p.evidence for p in parts]),
    )


def _anonymous(evidence: Evidence | None) -> Evidence | None:
    """The catch-all's evidence has no role of its own (it was never classified as one)."""
    return None if evidence is None else evidence.model_copy(update={"role": None,
                                                                     "confidence": None})


def _rest(folded: list[tuple[Group, str]], taken: set[str]) -> Group:
    name = _unique(REST_NAME, taken)
    lines = ["every other thread of the workload"]
    for why in dict.fromkeys(w for _, w in folded):
        lines.append(f"{why}:")
        lines += [f"  {describe(g)}" for g, w in folded if w == why]
    return Group(
        name=name, match=[WORKLOAD_REST], treatment=Treatment.DEFAULT,
        comment="\n".join(lines),
        evidence=_anonymous(_sum_evidence([g.evidence for g, _ in folded])),
    )


def _merge_pass(groups: list[Group], taken: set[str], decisions: list[str],
                why_of: Callable[[Group, Group], str | None]) -> list[Group]:
    """Merge every group into the first earlier one `why_of` accepts (None = refuse)."""
    out: list[Group] = []
    for group in groups:
        for i, earlier in enumerate(out):
            why = why_of(earlier, group)
            if why is not None:
                out[i] = _merge([earlier, group], taken, why)
                decisions.append(f"{out[i].name}: {why}")
                break
        else:
            out.append(group)
    return out


def compact(groups: list[Group], *, max_groups: int = DEFAULT_MAX_GROUPS) -> Compacted:
    """Fold idle groups, merge look-alikes, then keep within `max_groups` (see module note)."""
    if max_groups < 1:
        raise ValueError("max_groups must be >= 1")
    taken = {g.name for g in groups}
    decisions: list[str] = []
    folded: list[tuple[Group, str]] = []
    kept: list[Group] = []
    for group in groups:
        why = idle_reason(group)
        if why is None:
            kept.append(group)
        else:
            folded.append((group, f"folded, {why}"))
            taken.discard(group.name)

    def same(a: Group, b: Group) -> str | None:
        return None if apart(a, b) else "same treatment, nothing in the evidence sets them apart"

    kept = _merge_pass(kept, taken, decisions, same)

    def room() -> int:
        return max_groups - (1 if folded else 0)

    while len(kept) > max(room(), 0):
        pair = _closest_pair(kept)
        if pair is not None:
            i, j = pair
            reason = f"over the budget of {max_groups} groups ({apart(kept[i], kept[j])})"
            merged = _merge([kept[i], kept[j]], taken, reason)
            decisions.append(f"{merged.name}: {reason}")
            kept = [*kept[:i], merged, *kept[i + 1:j], *kept[j + 1:]]
            continue
        candidates = [g for g in kept if g.treatment is not Treatment.EXCLUSIVE] or kept
        if len(kept) == 1 and not folded:
            break
        smallest = min(candidates, key=lambda g: (_share(g), g.name))
        kept.remove(smallest)
        taken.discard(smallest.name)
        folded.append((smallest, f"folded, over the budget of {max_groups} groups"))
    if folded:
        rest = _rest(folded, taken)
        decisions.append(f"{rest.name}: {len(folded)} groups folded")
        kept.append(rest)
    merged = len(groups) - len(folded) - (len(kept) - (1 if folded else 0))
    return Compacted(kept, decisions, merged=merged, folded=len(folded))


def _closest_pair(groups: list[Group]) -> tuple[int, int] | None:
    """The same-treatment, non-exclusive pair with the least CPU between them."""
    best: tuple[float, int, int] | None = None
    for i, a in enumerate(groups):
        for j in range(i + 1, len(groups)):
            b = groups[j]
            if a.treatment is not b.treatment or a.treatment is Treatment.EXCLUSIVE:
                continue
            if overrides(a) != overrides(b):
                continue
            if a.avg_runtime_us or b.avg_runtime_us or a.exclude or b.exclude:
                continue
            if a.uid is not None or b.uid is not None or a.title or b.title:
                continue
            cost = _share(a) + _share(b)
            if best is None or cost < best[0]:
                best = (cost, i, j)
    return None if best is None else (best[1], best[2])
