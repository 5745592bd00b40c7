"""The oracle: does the real scx_layered accept a config, with every option we set?

Problem: scx_layered parses unknown option keys without complaint and drops
them, so "it loaded" does not prove a config means what we wrote.

Approach: run the pinned binary's `--print-and-exit` (threadwise.scx, the one
runner: it parses, normalises and prints the config, and needs no sched_ext),
then compare every field we set (names, comments, matches, the kind and each
option inside it) with what came back. Anything missing or changed is a
mismatch. A config it refuses raises ConfigRefused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from threadwise.scx import print_and_exit as _print_and_exit
from threadwise.scx import scx_layered_path
from threadwise.synthesize.layered import LayerConfig

Specs = list[dict[str, Any]]


def find_binary() -> Path:
    """The pinned scx_layered (threadwise.scx: $THREADWISE_SCX_LAYERED or the cache)."""
    return scx_layered_path()


def _json_data(config: LayerConfig | Specs) -> Specs:
    return config.to_json_data() if isinstance(config, LayerConfig) else config


def print_and_exit(config: LayerConfig | Specs, binary: Path | None = None,
                   args: Sequence[str] = ()) -> Specs:
    """What scx_layered makes of `config` (its normalised specs), or raise ConfigRefused.

    `args`: scx_layered flags (Compiled.scx_args), parsed by the same binary in the same call."""
    return _print_and_exit(_json_data(config), binary, args)


def mismatches(ours: LayerConfig | Specs, theirs: Specs) -> list[str]:
    """Every field we set that did not come back unchanged (empty: all good)."""
    ours = _json_data(ours)
    found: list[str] = []
    if len(ours) != len(theirs):
        return [f"{len(ours)} layers sent, {len(theirs)} came back"]
    for mine, back in zip(ours, theirs, strict=True):
        name = mine["name"]
        for key in ("name", "comment", "matches"):
            if key in mine and back.get(key) != mine[key]:
                found.append(f"{name}.{key}: sent {mine[key]!r}, got {back.get(key)!r}")
        for kind, options in mine["kind"].items():
            if kind not in back["kind"]:
                found.append(f"{name}.kind: sent {kind}, got {sorted(back['kind'])}")
                continue
            returned = back["kind"][kind]
            for option, value in options.items():
                if option not in returned:
                    found.append(f"{name}.{kind}.{option}: dropped by scx_layered")
                elif returned[option] != value:
                    found.append(f"{name}.{kind}.{option}: sent {value!r}, got "
                                 f"{returned[option]!r}")
    return found


def check(config: LayerConfig | Specs, binary: Path | None = None, args: Sequence[str] = ()) -> list[str]:
    """Run the oracle on `config` (typed, or raw JSON data) and scx_layered flags `args`: the
    mismatches (raises if refused)."""
    ours = _json_data(config)
    return mismatches(ours, _print_and_exit(ours, binary, args))
