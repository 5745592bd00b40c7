"""Which groups' patterns overlap, and which threads move because of it.

Problem: scx_layered puts a thread in the FIRST layer whose matches fire, so a
later group whose pattern an earlier group also matches loses those threads,
silently. A reviewer needs to know which group loses which threads.

Approach: two checks over the groups in order.
1. Pattern level (needs no capture): pattern `pb` of a later group is fully
   shadowed when an earlier group has a prefix `pa` with `pb` starting with
   `pa`, no exclude of that group covers `pb`, their AvgRuntime ranges (if
   both have one) intersect, and their uids (if both have one) are equal. Such a
   pattern can never match.
2. Name level (uses the observed comms in each group's evidence, or a
   capture's thread names): every observed name is assigned to the first
   group that matches it; names recorded in group B that land in an earlier
   group A move from B to A.
Only the first (earliest) group that takes a thread is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadwise.synthesize.patterns import comm_matches, prefix_of
from threadwise.synthesize.schema import Group, Profile


@dataclass(frozen=True)
class Overlap:
    """Threads of group `later` (pattern index `pattern`) taken by group `earlier`."""

    earlier: int
    later: int
    pattern: int
    by_pattern: str
    full: bool
    threads: tuple[str, ...]


def group_matches(group: Group, comm: str) -> bool:
    """Whether the group's comm matches fire for `comm` (AvgRuntime not considered)."""
    if any(comm_matches(prefix_of(e), comm) for e in group.exclude):
        return False
    return any(comm_matches(prefix_of(p), comm) for p in group.match)


def runtimes_meet(a: Group, b: Group) -> bool:
    ra, rb = a.avg_runtime_bounds(), b.avg_runtime_bounds()
    if ra is None or rb is None:
        return True
    return (rb[1] is None or ra[0] < rb[1]) and (ra[1] is None or rb[0] < ra[1])


def uids_meet(a: Group, b: Group) -> bool:
    """Whether both groups can hold a thread of one user (a group without a uid holds any)."""
    return a.uid is None or b.uid is None or a.uid == b.uid


def conditions_meet(a: Group, b: Group) -> bool:
    """Whether the conditions besides names (AvgRuntime, UIDEquals) let the groups share a thread."""
    return runtimes_meet(a, b) and uids_meet(a, b)


def shadowing_pattern(a: Group, pb: str) -> str | None:
    """The pattern of `a` that takes every thread `pb` matches, if any."""
    if any(pb.startswith(prefix_of(e)) for e in a.exclude):
        return None
    for pa in a.match:
        if pb.startswith(prefix_of(pa)):
            return pa
    return None


def find_overlaps(profile: Profile) -> list[Overlap]:
    """Every overlap in group order: full shadows first per group, then moved names."""
    found: list[Overlap] = []
    groups = profile.groups
    for j, later in enumerate(groups):
        names = later.evidence.names if later.evidence else []
        reported: set[str] = set()
        for k, pattern in enumerate(later.match):
            pb = prefix_of(pattern)
            for i in range(j):
                by = shadowing_pattern(groups[i], pb) if conditions_meet(groups[i], later) else None
                if by is None:
                    continue
                threads = tuple(n for n in names if comm_matches(pb, n))
                reported.update(threads)
                found.append(Overlap(i, j, k, by, True, threads))
                break
        moved: dict[tuple[int, str], list[str]] = {}
        for name in names:
            if name in reported or not group_matches(later, name):
                continue
            for i in range(j):
                # a condition a name cannot decide takes the name only where it surely holds
                if (groups[i].avg_runtime_us is None and groups[i].uid in (None, later.uid)
                        and group_matches(groups[i], name)):
                    by = next(p for p in groups[i].match if comm_matches(prefix_of(p), name))
                    moved.setdefault((i, by), []).append(name)
                    break
        for (i, by), threads in moved.items():
            k = next(
                (k for k, p in enumerate(later.match) if all(comm_matches(prefix_of(p), n)
                                                              for n in threads)),
                0,
            )
            found.append(Overlap(i, j, k, by, False, tuple(threads)))
    return found
