"""The pinned scx_layered and its command line: the one module that runs the binary.

synthesize's matcher set and oracle, refine and the runtime all speak to this
exact version; scripts/setup-scx.sh builds it into the cache. Everything about
its command line lives here, so no caller spells a flag or runs the binary
itself:

- `scx_layered_path` finds it ($THREADWISE_SCX_LAYERED, else the cache);
- `interval_args` spells its `--interval` flag (a profile's [scheduler] table), and
  `step_interval_ms` reads it back (how long after an attach the layers get their CPUs);
- `print_and_exit` is the one runner of `--print-and-exit` (it parses and
  normalises a layer config, needs no sched_ext, and prints `specs=<JSON>`):
  compile --check, apply and refine all go through it, so a refusal reads the
  same and exits with the same code (ConfigRefused) from every command;
- `launch_argv` is the command line that attaches it (the runtime's supervisor
  starts and watches the process: launching is the runtime's, not the flags);
- `scx_layered_version` asks `--version`.

The one launch line outside Python is the self-contained guest's agent
(runtime/lab/guest/agent.sh, POSIX sh in a guest without Python): it spells the
same `--enable-match-debug FLAGS f:CONFIG` and reads the flags from the plan.
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
VERSION_TIMEOUT_S = 30
# scx_layered's log without colour codes: the run log is read back by exitinfo.py and by people.
PLAIN_OUTPUT_ENV = {"NO_COLOR": "1", "RUST_LOG_STYLE": "never"}

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


# scx_layered 1.1.4's own step when no --interval is given (main.rs `Opts.interval`, 0.1 s)
DEFAULT_INTERVAL_MS = 100.0


def interval_args(interval_ms: float) -> tuple[str, ...]:
    """scx_layered's `--interval` flag (its userspace step, in seconds) for `interval_ms`."""
    return ("--interval", f"{interval_ms / 1000:g}")


def step_interval_ms(args: Sequence[str]) -> float:
    """The userspace step (ms) scx_layered runs with under `args`: their `--interval S`
    (or `--interval=S`), else its default. Its first step, this long after it attached, is the
    first that gives Confined and Grouped layers their CPUs (docs/lab.md, "The first step")."""
    value: str | None = None
    for at, arg in enumerate(args):
        if arg == "--interval" and at + 1 < len(args):
            value = args[at + 1]
        elif arg.startswith("--interval="):
            value = arg.split("=", 1)[1]
    return DEFAULT_INTERVAL_MS if value is None else float(value) * 1000


def _argv(binary: Path, flags: Sequence[str], config: Path | str) -> list[str]:
    # clap takes the flags anywhere, but the config (`f:PATH`) goes last in every call we make
    return [str(binary), *flags, f"f:{config}"]


def launch_argv(config: Path, args: Sequence[str] = (), binary: Path | None = None) -> list[str]:
    """The command line that attaches scx_layered with the layer config file `config`.

    `args` are the profile's flags (as for `print_and_exit`). --enable-match-debug keeps
    scx_layered's tid -> layer map, which runtime/membership.py reads to prove each thread
    sits in its layer.
    """
    return _argv(binary or scx_layered_path(), ["--enable-match-debug", *args], config)


def scx_layered_version(path: Path) -> str:
    """`1.1.4 x86_64-unknown-linux-gnu` from `scx_layered --version`."""
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, check=False)
    except OSError as error:
        raise MissingTool(f"cannot run {path}: {error}") from error
    match = re.search(r"scx_layered\s+(\S+(?:\s+\S+)?)", done.stdout)
    return match.group(1) if match else done.stdout.strip()


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
        done = subprocess.run(_argv(binary, [*args, "--print-and-exit"], path), capture_output=True,
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
