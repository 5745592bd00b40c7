"""The oracle: does the real scx_layered accept a config, with every option we set?

Problem: scx_layered parses unknown option keys without complaint and drops
them, so "it loaded" does not prove a config means what we wrote.

Approach: run the pinned binary with `--print-and-exit f:FILE` (it parses,
normalises and prints the config, and needs no sched_ext), then compare every
field we set (names, comments, matches, the kind and each option inside it)
with what came back. Anything missing or changed is a mismatch.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from threadwise.errors import ThreadwiseError
from threadwise.scx import scx_layered_path


def find_binary() -> Path:
    """The pinned scx_layered (threadwise.scx: $THREADWISE_SCX_LAYERED or the cache)."""
    return scx_layered_path()


def print_and_exit(specs: list[dict[str, Any]], binary: Path | None = None) -> list[dict[str, Any]]:
    """What scx_layered makes of `specs` (its normalised config), or raise."""
    binary = binary or find_binary()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(specs, handle)
        path = handle.name
    try:
        done = subprocess.run(
            [str(binary), "--print-and-exit", f"f:{path}"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    finally:
        os.unlink(path)
    if done.returncode != 0:
        raise ThreadwiseError(
            f"scx_layered rejected the config: {(done.stderr or done.stdout).strip()[-400:]}",
            hint="this is a bug in threadwise compile; please report it with the profile",
        )
    text = done.stdout
    start = text.find("specs=")
    if start < 0:
        raise ThreadwiseError(f"unexpected scx_layered output: {text[:200]!r}")
    return json.loads(text[start + len("specs="):])


def mismatches(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[str]:
    """Every field we set that did not come back unchanged (empty: all good)."""
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


def check(specs: list[dict[str, Any]], binary: Path | None = None) -> list[str]:
    """Run the oracle on `specs`: the list of mismatches (raises if rejected)."""
    return mismatches(specs, print_and_exit(specs, binary))
