"""The pinned scx_layered: one version, one place to find it, one way to ask its parser.

synthesize's matcher set and oracle, and the runtime all speak to this exact
version; scripts/setup-scx.sh builds it into the cache. `print_and_exit` is
the one runner of `scx_layered --print-and-exit` (it parses and normalises a
layer config, needs no sched_ext, and prints `specs=<JSON>`): compile --check,
apply and refine all go through it, so a refusal reads the same and exits with
the same code (ConfigRefused) from every command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from threadwise.errors import ConfigRefused, MissingTool
from threadwise.paths import cache_dir

SCX_LAYERED_VERSION = "1.1.4"
ENV_BINARY = "THREADWISE_SCX_LAYERED"   # override: a binary of the same version elsewhere
PARSE_TIMEOUT_S = 60

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def scx_layered_path() -> Path:
    """$THREADWISE_SCX_LAYERED, else the cached build; MissingTool naming the set-up step."""
    override = os.environ.get(ENV_BINARY)
    path = (Path(override) if override
            else cache_dir() / f"scx_layered-{SCX_LAYERED_VERSION}" / "bin" / "scx_layered")
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingTool(
            f"scx_layered {SCX_LAYERED_VERSION} not found at {path}",
            hint=f"run scripts/setup-scx.sh (cargo install, about 4 minutes the first time), "
                 f"or point ${ENV_BINARY} at the binary",
        )
    return path


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def error_chain(text: str) -> str:
    """anyhow's `Error: ...` line and its `Caused by:` entries, joined."""
    lines = strip_ansi(text).splitlines()
    for at in range(len(lines) - 1, -1, -1):
        if lines[at].startswith("Error: "):
            parts = [lines[at][len("Error: ") :].strip()]
            parts += [
                line.strip().lstrip("0123456789: ").strip()
                for line in lines[at + 1 :]
                if line.strip() and line.strip() != "Caused by:"
            ]
            return "; ".join(part for part in parts if part)
    return ""


def print_and_exit(specs: list[dict[str, Any]], binary: Path | None = None,
                   args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """What scx_layered makes of a layer config (JSON data): its normalised specs.

    `args` are scx_layered command-line flags (a profile's [scheduler] table): its parser
    checks them too. Raises ConfigRefused with scx_layered's own reason when it refuses either.
    """
    binary = binary or scx_layered_path()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(specs, handle)
        path = handle.name
    try:
        done = subprocess.run([str(binary), *args, "--print-and-exit", f"f:{path}"], capture_output=True,
                              text=True, timeout=PARSE_TIMEOUT_S, check=False)
    finally:
        os.unlink(path)
    if done.returncode != 0:
        why = error_chain(done.stderr + done.stdout) or strip_ansi(done.stderr or done.stdout).strip()[-400:]
        raise ConfigRefused(f"scx_layered rejected the config: {why}",
                            hint="nothing was attached; scx_layered's config.rs lists what a layer may hold")
    text = done.stdout
    start = text.find("specs=")
    if start < 0:
        raise ConfigRefused(f"unexpected scx_layered --print-and-exit output: {text[:200]!r}")
    return json.loads(text[start + len("specs="):])
