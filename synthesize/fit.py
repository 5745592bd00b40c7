"""Make a generated profile expressible by scx_layered, and say what it cost.

Problem: analysis describes names, not a layer config. A prefix may contain
characters our pattern syntax reads as glob (`*`, `?`, `[`) or be longer than
the 15 bytes the kernel keeps; two groups may share a prefix (names cannot
separate them); a workload may have more groups than scx_layered has layers.
A profile `synthesize` writes must still validate without errors.

Approach, in this order, each step leaving a note for the profile's comment:
1. prefixes: cut at the first glob or control character and at 15 bytes (a
   shorter prefix still matches every thread the longer one did); drop empty
   ones, and groups left without any.
2. layer budget: at most `max_layers - 1` groups (the catch-all takes the
   last layer); `default` groups go first, then the lowest CPU share.
3. per-layer limits: at most `max_layer_match_ors` patterns and as many
   excludes as fit in one AND block.
4. carve-outs: a broad earlier prefix excludes a strictly narrower later one
   when none of the earlier group's own threads (or patterns) carry it and the
   AND block has room.
5. shadows: patterns an earlier group takes entirely are dropped (first match
   wins); a group left without patterns is merged into that earlier group.
"""

from __future__ import annotations

from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.overlap import conditions_meet, shadowing_pattern
from threadwise.synthesize.patterns import GLOB_CHARS, comm_matches, prefix_of
from threadwise.synthesize.schema import Group, Treatment


def clean_prefix(prefix: str) -> str:
    """The longest expressible prefix of `prefix` (may be empty)."""
    for index, ch in enumerate(prefix):
        if ch in GLOB_CHARS or ord(ch) < 32 or ord(ch) == 127:
            prefix = prefix[:index]
            break
    limit = matcher_set().limits.max_comm_bytes
    return prefix.encode("utf-8")[:limit].decode("utf-8", "ignore")


def _budget(groups: list[Group], notes: list[str]) -> list[Group]:
    room = matcher_set().limits.max_layers - 1
    if len(groups) <= room:
        return groups

    def cost(group: Group) -> tuple[bool, float]:
        share = group.evidence.cpu_share if group.evidence else 0.0
        return (group.treatment is not Treatment.DEFAULT, share)

    dropped = sorted(groups, key=cost)[: len(groups) - room]
    notes.append(f"{len(dropped)} small groups left to the catch-all (scx_layered has "
                 f"{room + 1} layers): {', '.join(g.name for g in dropped)}")
    return [g for g in groups if g not in dropped]


def _max_excludes(group: Group) -> int:
    return (matcher_set().limits.max_match_ands - 2 - (1 if group.avg_runtime_us else 0)
            - (1 if group.uid is not None else 0))


def _carve_out(groups: list[Group]) -> list[Group]:
    out = list(groups)
    for j, later in enumerate(out):
        for i in range(j):
            earlier = out[i]
            own = earlier.evidence.names if earlier.evidence else []
            for prefix in (prefix_of(p) for p in later.match):
                by = shadowing_pattern(earlier, prefix)
                if (
                    by is None
                    or any(prefix_of(q).startswith(prefix) for q in earlier.match)  # not narrower
                    or any(comm_matches(prefix, n) for n in own)  # it would lose own threads
                    or len(earlier.exclude) >= _max_excludes(earlier)
                ):
                    continue
                earlier = earlier.model_copy(update={"exclude": [*earlier.exclude, prefix]})
            out[i] = earlier
    return out


def _shadows(groups: list[Group], notes: list[str]) -> list[Group]:
    out: list[Group] = []
    for later in groups:
        if later.title:   # a hinted layer comes first: no comm pattern shadows it
            out.append(later)
            continue
        kept, taken_by = [], ""
        for pattern in later.match:
            by = next((e.name for e in out if conditions_meet(e, later)
                       and shadowing_pattern(e, prefix_of(pattern)) is not None), None)
            if by is None:
                kept.append(pattern)
            else:
                taken_by = by
        if not kept:
            notes.append(f"group {later.name!r} merged into {taken_by!r}: names cannot "
                         "separate them")
            continue
        if len(kept) < len(later.match):
            notes.append(f"group {later.name!r}: patterns {sorted(set(later.match) - set(kept))} "
                         f"dropped, {taken_by!r} takes those threads first")
        out.append(later.model_copy(update={"match": kept}) if len(kept) < len(later.match)
                   else later)
    return out


def _limits(group: Group, notes: list[str]) -> Group:
    limits = matcher_set().limits
    max_excludes = _max_excludes(group)
    update = {}
    if len(group.match) > limits.max_layer_match_ors:
        update["match"] = group.match[: limits.max_layer_match_ors]
    if len(group.exclude) > max_excludes:
        update["exclude"] = group.exclude[:max_excludes]
    if update:
        notes.append(f"group {group.name!r} cut to scx_layered's per-layer match limits")
        return group.model_copy(update=update)
    return group


def fit(groups: list[Group], notes: list[str]) -> list[Group]:
    """Steps 2-5 on groups built from cleaned prefixes (step 1 happens while building)."""
    groups = [_limits(group, notes) for group in _budget(groups, notes)]
    return _shadows(_carve_out(groups), notes)
