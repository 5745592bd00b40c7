"""The oracle: does the real scx_layered accept a config, with every option we set?

Problem: scx_layered parses unknown option keys without complaint and drops
them, so "it loaded" does not prove a config means what we wrote.

Approach: run the pinned binary's `--print-and-exit` (threadwise.scx, the one
runner: it parses, normalises and prints the config, and needs no sched_ext),
read what it printed back into the typed `LayerConfig` (its normal form
prints every option, unset ones as JSON null: those are dropped first, null
being serde's "not set"; a config it prints that our reader still refuses is
a refusal too), then compare every field we set
(names, comments, matches, the kind and each option inside it) with what came
back. Anything missing or changed is a mismatch. A config it refuses raises
ConfigRefused. Both sides are typed; JSON exists only inside `threadwise.scx`
(the file handed to the binary, the text it prints).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from threadwise.errors import ConfigRefused, InputError
from threadwise.scx import print_and_exit as _print_and_exit
from threadwise.scx import scx_layered_path
from threadwise.synthesize.layered import LayerConfig, LayerSpec


def find_binary() -> Path:
    """The pinned scx_layered (threadwise.scx: $THREADWISE_SCX_LAYERED or the cache)."""
    return scx_layered_path()


def print_and_exit(config: LayerConfig, binary: Path | None = None,
                   args: Sequence[str] = ()) -> LayerConfig:
    """What scx_layered makes of `config` (its normalised layers), or raise ConfigRefused.

    `args`: scx_layered flags (Compiled.scx_args), parsed by the same binary in the same call."""
    printed = _print_and_exit(config.to_json_data(), binary, args)
    try:
        return LayerConfig.from_json_data(_set_options_only(printed), source="scx_layered --print-and-exit")
    except InputError as error:
        raise ConfigRefused(f"scx_layered printed a config threadwise cannot read: {error.message}",
                            hint="is $THREADWISE_SCX_LAYERED the pinned scx_layered?") from None


def _set_options_only(printed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """scx_layered's printed layers without the options it prints as null (not set)."""
    out = []
    for layer in printed:
        kind = layer.get("kind")
        if isinstance(kind, dict):
            kind = {name: {key: value for key, value in options.items() if value is not None}
                    if isinstance(options, dict) else options for name, options in kind.items()}
        out.append({**layer, "kind": kind})
    return out


def _spec_mismatches(mine: LayerSpec, back: LayerSpec) -> list[str]:
    found: list[str] = []
    ours, theirs = mine.to_json_data(), back.to_json_data()
    for key in ("name", "comment", "matches"):
        if key in ours and theirs.get(key) != ours[key]:
            found.append(f"{mine.name}.{key}: sent {ours[key]!r}, got {theirs.get(key)!r}")
    kind = mine.kind.name.value
    if back.kind.name is not mine.kind.name:
        return [*found, f"{mine.name}.kind: sent {kind}, got {[back.kind.name.value]}"]
    returned = back.kind.options.to_json_data()
    for option, value in mine.kind.options.to_json_data().items():
        if option not in returned:
            found.append(f"{mine.name}.{kind}.{option}: dropped by scx_layered")
        elif returned[option] != value:
            found.append(f"{mine.name}.{kind}.{option}: sent {value!r}, got {returned[option]!r}")
    return found


def mismatches(ours: LayerConfig, theirs: LayerConfig) -> list[str]:
    """Every field we set that did not come back unchanged (empty: all good)."""
    if len(ours) != len(theirs):
        return [f"{len(ours)} layers sent, {len(theirs)} came back"]
    return [found for mine, back in zip(ours, theirs, strict=True) for found in _spec_mismatches(mine, back)]


def check(config: LayerConfig, binary: Path | None = None, args: Sequence[str] = ()) -> list[str]:
    """Run the oracle on `config` and scx_layered flags `args`: the mismatches (raises if refused)."""
    return mismatches(config, print_and_exit(config, binary, args))
