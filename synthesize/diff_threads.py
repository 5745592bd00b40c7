"""Which threads a profile change moves: the thread half of `threadwise diff`.

Problem: a profile places a thread in two steps, as scx_layered does: its
workload first (every layer's match block requires the `[workload]` process
comm prefix and cgroup prefix), then the first group whose patterns take its
name. Comparing only the second step misses the change that moves every
thread: a renamed `process` leaves all of them to other schedulers' care.
And a thread that keeps its layer's name can still be scheduled differently
when that layer's settings change.

Approach: each thread is a name with its process comm and cgroup (from a
capture; from the profiles' evidence names, as threads of the old profile's
workload, when there is none). Under each profile it is outside the workload
(with the reason) or in a layer. A thread in neither workload is not the
profiles' business and is not counted. A thread whose place differs is a
`Move` (leaving and joining the profile included); one that stays in a layer
whose settings change (the caller says which fields change per layer) is
counted in that layer's `Retreat`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.analyze.titles import title_selects
from threadwise.synthesize.overlap import group_matches
from threadwise.synthesize.patterns import comm_matches
from threadwise.synthesize.rules import CATCH_ALL
from threadwise.synthesize.schema import Group, Profile
from threadwise.words import Lit, Words


@dataclass(frozen=True)
class Thread:
    """A thread as the matchers see it: its comm, its process's comm, its cgroup, its process's
    title (None: unknown)."""

    name: str
    process: str | None = None
    cgroup: str | None = None
    title: str | None = None

    @staticmethod
    def from_capture(path: Path) -> list[Thread]:
        """Every named thread of a capture (observe's `thread` view), once per name, process, cgroup."""
        # deferred: duckdb (observe's store) is loaded only when a capture is read
        from threadwise.observe.store import open_capture
        from threadwise.sqlfiles import statement

        with open_capture(path) as con:
            rows = con.execute(statement("threadwise.synthesize", "review.sql", "capture_threads")).fetchall()
        return [Thread(name, process, cgroup, title) for name, process, cgroup, title in rows]


@dataclass(frozen=True)
class Move:
    """A thread that lands in another layer, or leaves or joins the profile."""

    thread: str
    old: Words
    new: Words
    process: str | None = None    # shown when the threads come from more than one process


@dataclass(frozen=True)
class Retreat:
    """Threads that keep their layer while its settings change."""

    layer: Words
    fields: tuple[str, ...]
    threads: tuple[str, ...]


@dataclass
class Placed:
    moves: list[Move] = field(default_factory=list)
    retreated: list[Retreat] = field(default_factory=list)
    checked: int = 0
    source: Words = ("evidence",)


def outside(profile: Profile, thread: Thread) -> Words | None:
    """Why `thread` is not in the profile's workload (scx_layered's PcommPrefix / CgroupPrefix), or
    None when it is. A process or cgroup the capture does not know cannot be placed: outside."""
    want = profile.workload
    if want.process is not None:
        if thread.process is None:
            return ("its process is not known",)
        if not comm_matches(want.process, thread.process):
            return ("its process ", Lit(thread.process), " does not start with ", Lit(want.process))
    if want.cgroup is not None:
        if thread.cgroup is None:
            return ("its cgroup is not known",)
        if not thread.cgroup.startswith(want.cgroup):
            return ("its cgroup ", Lit(thread.cgroup), " is not under ", Lit(want.cgroup))
    return None


def layer_of(profile: Profile, comm: str, title: str | None = None) -> Group | None:
    """The group a thread named `comm` of the workload, of a process titled `title`, lands in:
    the first title group whose pattern selects the title (hinted layers come first), else the
    first group whose comm patterns match (None: the compiled catch-all `rest`). A title no
    group selects gets the hinted default layer, which schedules as the catch-all does."""
    titled = next((g for g in profile.groups if any(title_selects(p, title) for p in g.title)), None)
    if titled is not None:
        return titled
    return next((g for g in profile.groups if group_matches(g, comm)), None)


def _label(group: Group | None) -> Words:
    if group is None:
        return (Lit(CATCH_ALL), " (catch-all)")
    return (Lit(group.name), f" ({group.treatment.value})")


def _evidence_threads(old: Profile, new: Profile) -> tuple[list[Thread], Words]:
    """The evidence names of both profiles, as threads of the old profile's workload."""
    names = sorted({n for p in (old, new) for g in p.groups if g.evidence for n in g.evidence.names})
    threads = [Thread(n, old.workload.process, old.workload.cgroup) for n in names]
    where: Words = ()
    if old.workload.process is not None:
        where += (" of process ", Lit(old.workload.process))
    if old.workload.cgroup is not None:
        where += (" in cgroup ", Lit(old.workload.cgroup))
    return threads, ("the profiles' evidence names, as threads", *where)


def place_threads(old: Profile, new: Profile, pairs: dict[str, str], settings: dict[str, list[str]],
                  threads: Sequence[Thread] | None) -> Placed:
    """Moves and settings changes of `threads` (None: the evidence names) from `old` to `new`.

    `pairs` maps old group names to their new names; `settings` maps a new layer name (a group,
    or the catch-all) to the fields whose change alters how its threads are scheduled.
    """
    placed = Placed()
    if threads is None:
        threads, placed.source = _evidence_threads(old, new)
    mine = sorted({t for t in threads if outside(old, t) is None or outside(new, t) is None},
                  key=lambda t: (t.name, t.process or "", t.cgroup or ""))
    many = len({t.process for t in mine}) > 1
    staying: dict[str, list[str]] = {}
    labels: dict[str, Words] = {}
    for thread in mine:
        out_a, out_b = outside(old, thread), outside(new, thread)
        a = None if out_a else layer_of(old, thread.name, thread.title)
        b = None if out_b else layer_of(new, thread.name, thread.title)
        a_key = None if out_a else pairs.get(a.name, a.name) if a else CATCH_ALL
        b_key = None if out_b else (b.name if b else CATCH_ALL)
        if a_key != b_key:
            placed.moves.append(Move(thread.name, _place(a, out_a), _place(b, out_b),
                                     thread.process if many else None))
        elif b_key is not None and settings.get(b_key):
            staying.setdefault(b_key, []).append(thread.name)
            labels[b_key] = _label(b)
    placed.retreated = [Retreat(labels[key], tuple(settings[key]), tuple(dict.fromkeys(names)))
                        for key, names in staying.items()]
    placed.checked = len(mine)
    return placed


def _place(group: Group | None, out: Words | None) -> Words:
    return ("not in the profile: ", *out) if out else _label(group)
