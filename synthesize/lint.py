"""Placement lint: will the layers put the workload's threads where the profile means?

Problem: a profile can be valid and still place threads badly on a given
machine: two hot threads of an exclusive group squeezed onto the SMT siblings
of one core, more exclusive cores than the machine can spare, busy threads no
group matches, groups whose patterns take each other's threads.

Approach: lint works on `LayerView`s (a compiled profile, or any scx_layered
JSON, so pinned tier-style configs are linted alike) and a machine shape, plus
optionally facts from a capture taken under the profile (analyze's view of
it: which threads are hot by `contract.is_hot`, and how long pairs co-ran on
SMT siblings; lint_capture.py). Each invariant is a function returning
Findings with a name, an explanation and the threads involved:
- smt_collision: a fixed-size exclusive layer (or, once demoted, the cores
  left for it) holds fewer whole cores than hot threads on an SMT shape, so
  some hot threads must share a core's siblings; with a capture, two threads
  of exclusive layers observed on sibling CPUs at once for longer than a
  threshold.
- oversubscribed: exclusive cores asked for exceed the shape minus the reserve.
- uncovered: busy threads of the workload (capture) that only the catch-all takes.
- overlap: a pattern of a later layer that an earlier one always takes, or
  recorded threads of a layer that land in an earlier one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from threadwise.analyze.contract import is_hot
from threadwise.shape import Shape
from threadwise.synthesize.layers import Block, LayerView

BUSY_SHARE = 0.05
SMT_OVERLAP_SHARE = 0.05

EXPLANATIONS = {
    "smt_collision": "SMT siblings share one core's execution units: two hot threads on the "
                     "siblings of one core each get roughly 55-65% of a core, which is what "
                     "exclusive treatment is meant to prevent.",
    "oversubscribed": "exclusive groups ask for more whole cores than the shape has outside the "
                      "reserve; `compile` demotes those that do not fit to Grouped layers.",
    "uncovered": "busy threads of the workload that no group matches fall into the catch-all "
                 "with the rest of the system and get no treatment of their own.",
    "overlap": "scx_layered puts a thread into the first layer whose matches fire; a later "
               "layer loses every thread an earlier one also matches.",
}


@dataclass(frozen=True)
class ThreadFact:
    """One thread of a capture: its names, CPU share and demand (analyze's per-thread features).

    `cpu_share` is in CPUs over the thread's life (1.0 = one busy CPU), `demand`
    the running-or-runnable share of its life; `hot` is analyze's definition
    (contract.is_hot), so lint and synthesize count the same threads as hot.
    `title` is its process's last title (the cmdline a server writes its role over, e.g.
    `postgres: checkpointer`; None: the capture knows none), what a title group selects.
    """

    utid: int
    name: str
    process_name: str | None
    cpu_share: float
    is_target: bool = True
    demand: float = 0.0
    title: str | None = None

    @property
    def hot(self) -> bool:
        return bool(is_hot(self.cpu_share, self.demand))


@dataclass
class CaptureFacts:
    """What lint reads from a capture: the target's threads, and how long pairs of them ran on
    the two SMT siblings of one core at the same time (analyze's smt_corun, ns per utid pair)."""

    duration_ns: int
    threads: list[ThreadFact]
    corun: dict[tuple[int, int], int] = field(default_factory=dict)   # (utid, utid), smaller first


@dataclass(frozen=True)
class Finding:
    lint: str
    message: str
    threads: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    severity: str = "error"

    @property
    def explanation(self) -> str:
        return EXPLANATIONS[self.lint]

    def render(self) -> str:
        # a finding is a result of the check, not a failure of the tool: `finding[...]`, never
        # `error[...]` (error-level findings are what makes lint exit 7)
        label = "finding" if self.severity == "error" else self.severity
        text = f"{label}[{self.lint}]: {self.message}"
        if self.threads:
            text += f"\n  threads: {', '.join(self.threads)}"
        return text + f"\n  why: {self.explanation}"

    def as_dict(self) -> dict[str, object]:
        return {"lint": self.lint, "severity": self.severity, "message": self.message,
                "explanation": self.explanation, "threads": list(self.threads),
                "layers": list(self.layers)}


def _is_catch_all(view: LayerView) -> bool:
    return view.blocks == (Block(),)


def _first_layer(views: list[LayerView], thread: ThreadFact) -> int | None:
    """The layer scx_layered puts `thread` in: the first, in layer order, whose title patterns
    select its process's title (the runtime's hint) or whose comm blocks match it. Compile puts
    the hinted layers first, so a title group takes its processes before any comm pattern can."""
    for index, view in enumerate(views):
        if view.selects_title(thread.title):
            return index
        if not _is_catch_all(view) and view.matches(thread.name, thread.process_name):
            return index
    return None


def _hot_by_layer(views: list[LayerView], facts: CaptureFacts | None) -> dict[int, list[str]]:
    """Hot threads per layer: from the capture when given, else the profile's evidence.

    Without a capture the evidence says how many threads are hot, not which; the
    names listed are then the group's observed threads (or placeholders).
    """
    hot: dict[int, list[str]] = defaultdict(list)
    if facts is None:
        for index, view in enumerate(views):
            if len(view.names) == view.hot_threads:
                hot[index] = list(view.names)
            elif view.hot_threads:
                hot[index] = [f"{view.name}#{n + 1}" for n in range(view.hot_threads)]
        return hot
    for thread in facts.threads:
        index = _first_layer(views, thread)
        if index is not None and thread.is_target and thread.hot:
            hot[index].append(thread.name)
    return hot


def smt_collisions(views: list[LayerView], shape: Shape, facts: CaptureFacts | None = None,
                   threshold: float = SMT_OVERLAP_SHARE) -> list[Finding]:
    """Hot threads of exclusive layers that the layer's size puts on siblings."""
    found: list[Finding] = []
    tpc = shape.threads_per_core
    budget = shape.exclusive_budget
    hot = _hot_by_layer(views, facts)
    for index, view in enumerate(views):
        if not view.exclusive and not view.demoted:
            continue
        cores = view.fixed_cores if view.fixed_cores is not None else budget
        budget = max(budget - (view.fixed_cores or 0), 0)
        threads = hot.get(index, [])
        if tpc >= 2 and 1 <= cores < len(threads):
            found.append(Finding(
                "smt_collision",
                f"layer {view.name!r}: {len(threads)} hot threads in {cores} whole "
                f"core{'s' if cores != 1 else ''} ({cores * tpc} sibling CPUs): "
                f"{len(threads) - cores} must share a core with another hot thread",
                tuple(threads), (view.name,)))
    if facts is not None:
        found += _observed_collisions(views, facts, threshold)
    return found


def _observed_collisions(views: list[LayerView], facts: CaptureFacts,
                         threshold: float = SMT_OVERLAP_SHARE) -> list[Finding]:
    """Exclusive-layer threads seen running on two siblings of one core at once."""
    layer_of = {t.utid: _first_layer(views, t) for t in facts.threads}
    names = {t.utid: t.name for t in facts.threads}
    exclusive = {i for i, v in enumerate(views) if v.exclusive}
    found = []
    for (ua, ub), ns in sorted(facts.corun.items()):
        layers = [layer_of.get(u) for u in (ua, ub)]
        if not all(index in exclusive for index in layers):
            continue
        share = ns / facts.duration_ns if facts.duration_ns else 0.0
        if share >= threshold:
            found.append(Finding(
                "smt_collision",
                f"observed: {names[ua]} and {names[ub]} ran on sibling CPUs of one core at the "
                f"same time for {ns / 1e6:.1f} ms ({share:.1%} of the capture, threshold "
                f"{threshold:.0%})",
                (names[ua], names[ub]), tuple(sorted({views[i].name for i in layers if i is not None}))))
    return found


def oversubscribed(views: list[LayerView], shape: Shape) -> list[Finding]:
    asked = [(v.name, v.demanded_cores or v.fixed_cores or 0, v.names) for v in views
             if v.exclusive or v.demoted]
    total = sum(cores for _, cores, _ in asked)
    if total <= shape.exclusive_budget:
        return []
    parts = ", ".join(f"{name} {cores}" for name, cores, _ in asked)
    return [Finding(
        "oversubscribed",
        f"exclusive groups ask for {total} whole cores ({parts}); the shape has "
        f"{shape.exclusive_budget} ({shape.describe()})",
        tuple(n for _, _, names in asked for n in names), tuple(n for n, _, _ in asked))]


def uncovered(views: list[LayerView], facts: CaptureFacts | None) -> list[Finding]:
    if facts is None:
        return []
    busy = sorted((t for t in facts.threads if t.is_target and t.cpu_share >= BUSY_SHARE
                   and _first_layer(views, t) is None), key=lambda t: (-t.cpu_share, t.name))
    if not busy:
        return []
    detail = ", ".join(f"{t.name} {t.cpu_share:.2f}" for t in busy[:8])
    return [Finding(
        "uncovered",
        f"{len(busy)} busy threads of the workload match no group (CPUs busy: {detail})",
        tuple(t.name for t in busy))]


def _shadowed(earlier: Block, later: Block) -> bool:
    if earlier.other or len(earlier.comm) != 1 or len(later.comm) != 1:
        return False
    pb = later.comm[0]
    if not pb.startswith(earlier.comm[0]) or any(pb.startswith(e) for e in earlier.exclude):
        return False
    return all(any(q.startswith(p) for q in later.pcomm) for p in earlier.pcomm)


def overlaps(views: list[LayerView]) -> list[Finding]:
    found: list[Finding] = []
    for j, later in enumerate(views):
        shadowed: set[str] = set()
        for k, block in enumerate(later.blocks):
            for earlier in views[:j]:
                if not _is_catch_all(earlier) and any(_shadowed(b, block) for b in earlier.blocks):
                    threads = tuple(n for n in later.names if block.matches(n, None))
                    shadowed.update(threads)
                    found.append(Finding(
                        "overlap",
                        f"layer {later.name!r} match block {k + 1} ({'+'.join(block.comm)}) can "
                        f"never fire: the earlier layer {earlier.name!r} takes every such thread",
                        threads, (earlier.name, later.name)))
                    break
        for earlier in views[:j]:
            if _is_catch_all(earlier) or earlier.blocks == later.blocks:
                continue
            moved = tuple(n for n in later.names if n not in shadowed and later.matches(n)
                          and earlier.matches(n))
            if moved:
                found.append(Finding(
                    "overlap",
                    f"threads recorded in {later.name!r} land in the earlier layer "
                    f"{earlier.name!r}", moved, (earlier.name, later.name), severity="warning"))
    return found


def lint(views: list[LayerView], shape: Shape, facts: CaptureFacts | None = None,
         smt_threshold: float = SMT_OVERLAP_SHARE) -> list[Finding]:
    """Every placement finding, in lint order."""
    return (smt_collisions(views, shape, facts, smt_threshold) + oversubscribed(views, shape)
            + uncovered(views, facts) + overlaps(views))


def capture_mismatch(process: str, facts: CaptureFacts) -> str | None:
    """Why `facts` cannot be a capture of the workload `process` names (scx_layered PcommPrefix), or None.

    A profile's layers match threads only inside its workload's process, so
    checking its coverage against another process's threads would report every
    thread as uncovered instead of saying the capture is the wrong one.
    """
    seen = sorted({t.process_name for t in facts.threads if t.is_target and t.process_name})
    if not seen:
        return "it holds no threads of a target process"
    if any(name.startswith(process) for name in seen):
        return None
    return f"its target process is {', '.join(repr(n) for n in seen)}, the profile's is {process!r}"
