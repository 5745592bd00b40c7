"""A neutral view of scx_layered layers, from a compiled profile or any layer config JSON.

Lint reads layers through this view, so a hand-written (for example pinned,
tier-style) scx_layered config is linted exactly like a compiled profile:
both are lists of layers with comm-prefix blocks, an exclusive flag and, for
fixed-size Confined layers, a number of whole cores.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from threadwise.errors import InputError
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.patterns import comm_matches
from threadwise.synthesize.schema import Profile
from threadwise.synthesize.shape import Shape


@dataclass(frozen=True)
class Block:
    """One AND block: every comm/pcomm prefix must match, no exclude may."""

    comm: tuple[str, ...] = ()
    pcomm: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    pcomm_exclude: tuple[str, ...] = ()
    other: tuple[str, ...] = ()  # matchers a name cannot decide (cgroup, nice, runtime, ...)

    def matches(self, comm: str, pcomm: str | None) -> bool:
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

    def matches(self, comm: str, pcomm: str | None = None) -> bool:
        return any(block.matches(comm, pcomm) for block in self.blocks)


def _block(raw: list[dict[str, Any]]) -> Block:
    parts: dict[str, list[str]] = {"CommPrefix": [], "PcommPrefix": [], "CommPrefixExclude": [],
                                   "PcommPrefixExclude": []}
    other: list[str] = []
    for match in raw:
        if not isinstance(match, dict) or len(match) != 1:
            raise InputError(f"bad scx_layered match {match!r}",
                             hint='each match is one {"Matcher": value} object')
        (kind, value), = match.items()
        if kind not in matcher_set().matchers:
            raise InputError(f"unknown scx_layered matcher {kind!r}")
        if kind in parts:
            parts[kind].append(value)
        else:
            other.append(kind)
    return Block(tuple(parts["CommPrefix"]), tuple(parts["PcommPrefix"]),
                 tuple(parts["CommPrefixExclude"]), tuple(parts["PcommPrefixExclude"]),
                 tuple(other))


def views_from_specs(specs: list[dict[str, Any]], shape: Shape) -> list[LayerView]:
    """Layer views of a raw scx_layered config (list of layer specs)."""
    views = []
    for spec in specs:
        if not isinstance(spec["kind"], dict) or len(spec["kind"]) != 1 or not isinstance(
            spec["matches"], list
        ):
            raise InputError(f"layer {spec.get('name')!r}: kind must be one of "
                             f"{sorted(matcher_set().layer_kinds)} and matches a list of lists")
        (kind, options), = spec["kind"].items()
        if kind not in matcher_set().layer_kinds:
            raise InputError(f"layer {spec['name']!r}: unknown kind {kind!r}",
                             hint=f"scx_layered knows {sorted(matcher_set().layer_kinds)}")
        fixed = None
        cpus = options.get("cpus_range")
        if kind == "Confined" and cpus and cpus[0] == cpus[1]:
            fixed = math.ceil(cpus[0] / shape.threads_per_core)
        views.append(LayerView(
            name=spec["name"], kind=kind,
            blocks=tuple(_block(block) for block in spec["matches"]),
            exclusive=bool(options.get("exclusive", False)),
            fixed_cores=fixed, demanded_cores=fixed or 0,
        ))
    return views


def views_from_profile(profile: Profile, shape: Shape) -> list[LayerView]:
    """Layer views of a profile compiled for `shape`, with its evidence attached."""
    compiled = compile_profile(profile, shape)
    views = views_from_specs(compiled.specs, shape)
    out = []
    for view, group, plan in zip(views, profile.groups, compiled.plans, strict=False):
        out.append(LayerView(
            name=view.name, kind=view.kind, blocks=view.blocks, exclusive=view.exclusive,
            fixed_cores=view.fixed_cores,
            demanded_cores=group.exclusive_cores() if group.treatment.value == "exclusive" else 0,
            hot_threads=group.hot_threads,
            names=tuple(group.evidence.names) if group.evidence else (),
            demoted=plan.demoted,
        ))
    return [*out, views[-1]]


def load_layer_config(path: Path) -> list[dict[str, Any]]:
    """Read an scx_layered JSON layer config (a list of layer specs)."""
    try:
        specs = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as bad:
        raise InputError(f"{path}:{bad.lineno}:{bad.colno}: invalid JSON: {bad.msg}") from None
    if not isinstance(specs, list) or not all(
        isinstance(s, dict) and {"name", "matches", "kind"} <= set(s) for s in specs
    ):
        raise InputError(f"{path}: not an scx_layered layer config",
                         hint="expected a JSON list of layers with name, matches and kind")
    return specs
