"""A neutral view of scx_layered layers, from a compiled profile or any layer config JSON.

Lint reads layers through this view, so a hand-written (for example pinned,
tier-style) scx_layered config is linted exactly like a compiled profile:
both are typed `LayerConfig`s (layered.py), seen here as layers with
comm-prefix blocks, an exclusive flag and, for fixed-size Confined layers, a
number of whole cores. A title group's layer (HintEquals) also carries its title patterns when
it comes from a profile; a JSON config does not say which titles its hints stand for, so its
hinted layers take no thread in lint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from threadwise.analyze.titles import title_selects
from threadwise.shape import Shape
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.layered import LayerConfig, LayerMatch
from threadwise.synthesize.patterns import comm_matches
from threadwise.synthesize.schema import Profile


@dataclass(frozen=True)
class Block:
    """One AND block: every comm/pcomm prefix must match, no exclude may."""

    comm: tuple[str, ...] = ()
    pcomm: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    pcomm_exclude: tuple[str, ...] = ()
    other: tuple[str, ...] = ()  # matchers a name cannot decide (cgroup, nice, runtime, ...)

    @property
    def hinted(self) -> bool:
        """A HintEquals block: the runtime's title classifier decides it, never a thread's name."""
        return "HintEquals" in self.other

    def matches(self, comm: str, pcomm: str | None) -> bool:
        if self.hinted:
            return False
        if any(not comm_matches(p, comm) for p in self.comm):
            return False
        if any(comm_matches(p, comm) for p in self.exclude):
            return False
        if pcomm is not None:
            if any(not comm_matches(p, pcomm) for p in self.pcomm):
                return False
            if any(comm_matches(p, pcomm) for p in self.pcomm_exclude):
                return False
        return True


@dataclass(frozen=True)
class LayerView:
    """What lint needs to know about one layer."""

    name: str
    kind: str
    blocks: tuple[Block, ...]
    exclusive: bool = False
    fixed_cores: int | None = None
    demanded_cores: int = 0
    hot_threads: int = 0
    names: tuple[str, ...] = ()
    demoted: bool = False
    titles: tuple[str, ...] = ()   # a title group's patterns (`postgres: checkpointer`)

    def matches(self, comm: str, pcomm: str | None = None) -> bool:
        return any(block.matches(comm, pcomm) for block in self.blocks)

    def selects_title(self, title: str | None) -> bool:
        """Whether the runtime hints a process of `title` into this layer: one of its title
        patterns selects the title, by the rule synthesize and diff use (titles.title_selects)."""
        return any(title_selects(pattern, title) for pattern in self.titles)


def _block(matches: tuple[LayerMatch, ...]) -> Block:
    parts: dict[str, list[str]] = {"CommPrefix": [], "PcommPrefix": [], "CommPrefixExclude": [],
                                   "PcommPrefixExclude": []}
    other: list[str] = []
    for match in matches:
        if match.kind in parts:
            parts[match.kind].append(match.value)
        else:
            other.append(match.kind)
    return Block(tuple(parts["CommPrefix"]), tuple(parts["PcommPrefix"]),
                 tuple(parts["CommPrefixExclude"]), tuple(parts["PcommPrefixExclude"]),
                 tuple(other))


def views_from_config(config: LayerConfig, shape: Shape) -> list[LayerView]:
    """Layer views of a typed scx_layered config (compiled, or read from JSON)."""
    views = []
    for spec in config:
        cpus = spec.kind.fixed_cpus
        fixed = None if cpus is None else math.ceil(cpus / shape.threads_per_core)
        views.append(LayerView(
            name=spec.name, kind=spec.kind.name.value,
            blocks=tuple(_block(block) for block in spec.matches),
            exclusive=spec.kind.exclusive, fixed_cores=fixed, demanded_cores=fixed or 0,
        ))
    return views


def views_from_profile(profile: Profile, shape: Shape) -> list[LayerView]:
    """Layer views of a profile compiled for `shape`, with its evidence attached."""
    compiled = compile_profile(profile, shape)
    views = views_from_config(compiled.config, shape)
    groups = {g.name: g for g in profile.groups}
    plans = {plan.group: plan for plan in compiled.plans}
    out = []
    for view in views[:-1]:
        if view.name not in groups:   # the hinted default layer: no group of its own
            out.append(view)
            continue
        group, plan = groups[view.name], plans[view.name]
        out.append(LayerView(
            name=view.name, kind=view.kind, blocks=view.blocks, exclusive=view.exclusive,
            fixed_cores=view.fixed_cores,
            demanded_cores=group.exclusive_cores() if group.treatment.value == "exclusive" else 0,
            hot_threads=group.hot_threads,
            names=tuple(group.evidence.names) if group.evidence else (),
            demoted=plan.demoted, titles=tuple(group.title),
        ))
    return [*out, views[-1]]


def load_layer_config(path: Path) -> LayerConfig:
    """Read an scx_layered JSON layer config (a list of layer specs), typed and checked."""
    return LayerConfig.load(path)
