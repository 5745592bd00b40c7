"""The matcher set and limits of the pinned scx_layered, loaded from data.

Problem: a profile is only useful if scx_layered can express it, and what
scx_layered can express (its `LayerMatch` variants, layer kinds, options and
the limits of `verify_layer_specs`) changes between versions.

Approach: the set is data (`data/scx_layered-<version>.json`), transcribed
from the crate's `src/config.rs`, `src/bpf/intf.h` and `src/main.rs`; a test
re-reads the real crate source and fails when they drift apart. Validation and
compilation read their limits from here, never from literals of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from threadwise.scx import SCX_LAYERED_VERSION


@dataclass(frozen=True)
class Limits:
    """The numeric limits scx_layered enforces (or that decide whether a match can fire)."""

    max_layers: int
    max_layer_match_ors: int
    max_match_ands: int
    max_comm_bytes: int
    max_path: int
    max_layer_name: int
    min_layer_weight: int
    max_layer_weight: int
    default_layer_weight: int
    default_slice_us: int
    max_hint: int


@dataclass(frozen=True)
class MatcherSet:
    """What one scx_layered version accepts in a layer config."""

    version: str
    matchers: dict[str, tuple[str, ...]]
    layer_kinds: dict[str, dict[str, str]]
    common_options: dict[str, str]
    deprecated_options: tuple[str, ...]   # accepted (and ignored or warned about) by scx_layered
    growth_algos: tuple[str, ...]
    placements: tuple[str, ...]
    limits: Limits
    rules: tuple[str, ...]

    def kind_options(self, kind: str) -> set[str]:
        """Every option key a layer of `kind` accepts (kind fields + LayerCommon)."""
        return set(self.layer_kinds[kind]) | set(self.common_options)


def _limits(raw: dict[str, Any]) -> Limits:
    names = Limits.__dataclass_fields__
    return Limits(**{name: int(raw[name]) for name in names})


@cache
def matcher_set(version: str = SCX_LAYERED_VERSION) -> MatcherSet:
    """The matcher set of scx_layered `version` (only the pinned one is bundled)."""
    data_file = resources.files("threadwise.synthesize") / "data" / f"scx_layered-{version}.json"
    raw = json.loads(data_file.read_text(encoding="utf-8"))
    return MatcherSet(
        version=raw["version"],
        matchers={name: tuple(args) for name, args in raw["matchers"].items()},
        layer_kinds={kind: dict(fields) for kind, fields in raw["layer_kinds"].items()},
        common_options=dict(raw["common_options"]),
        deprecated_options=tuple(raw["deprecated_options"]),
        growth_algos=tuple(raw["growth_algos"]),
        placements=tuple(raw["placements"]),
        limits=_limits(raw["limits"]),
        rules=tuple(raw["rules"]),
    )
