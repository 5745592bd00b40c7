"""What `apply` hands to scx_layered: a layer config JSON, from a profile or as given.

A profile TOML goes through the synthesize stage exactly as `threadwise
compile` would: read + validate (errors stop here, with file and line), the
machine shape (`host` reads this machine's topology, which inside the lab VM
is the guest's), compile, then scx_layered's own `--print-and-exit` oracle,
so that no option is silently dropped. A `.json` file is taken as an
scx_layered layer config (a list of layer specs, or `{"specs": [...]}`) and
only parsed by scx_layered's `--print-and-exit`; the shape does not apply to
it. Either way the result is written to the run directory and the launch uses
that copy, so the applied config is what `status` shows.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from threadwise.errors import InputError, UsageError
from threadwise.runtime.exitinfo import error_chain


@dataclass(frozen=True)
class ResolvedConfig:
    specs: list[dict[str, Any]]
    source: str  # the file the user named
    kind: str  # "profile" or "json"
    shape: str | None  # the shape a profile was compiled for
    notes: tuple[str, ...] = ()

    def layer_names(self) -> list[str]:
        return [str(spec.get("name", "?")) for spec in self.specs]


def _from_json(path: Path) -> ResolvedConfig:
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read: {error}") from error
    except json.JSONDecodeError as error:
        raise InputError(
            f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}",
            hint="a .json file must be an scx_layered layer config (a list of layer specs)",
        ) from error
    specs = raw.get("specs") if isinstance(raw, dict) else raw
    if not isinstance(specs, list) or not all(isinstance(spec, dict) for spec in specs):
        raise InputError(
            f"{path}: not an scx_layered layer config (expected a list of layer objects)",
            hint="see `scx_layered --example FILE` for the format",
        )
    return ResolvedConfig(specs=specs, source=str(path), kind="json", shape=None)


def _from_profile(path: Path, shape_spec: str) -> ResolvedConfig:
    try:
        from threadwise.synthesize import compile as compile_mod
        from threadwise.synthesize import diagnostics, rules, shape
    except ImportError as missing:
        raise UsageError(
            f"{path}: compiling profiles needs the synthesize stage ({missing})",
            hint="pass an scx_layered layer config (.json) instead",
        ) from missing
    profile, found = rules.check_file(path)
    if profile is None or diagnostics.errors(found):
        raise diagnostics.ProfileError(str(path), found)
    target = shape.parse_shape(shape_spec)
    compiled = compile_mod.compile_profile(profile, target)
    try:
        from threadwise.synthesize import oracle
    except ImportError:
        oracle = None
    if oracle is not None:
        dropped = oracle.check(compiled.specs)
        if dropped:
            raise InputError(
                f"{path}: scx_layered would not apply the compiled config as written: "
                + "; ".join(dropped[:3]),
                hint="this is a bug in threadwise compile; nothing was attached",
            )
    return ResolvedConfig(
        specs=compiled.specs,
        source=str(path),
        kind="profile",
        shape=target.describe(),
        notes=tuple(compiled.notes),
    )


def resolve(path: Path, shape_spec: str = "host") -> ResolvedConfig:
    """The layer config for PROFILE (.toml) or CONFIG (.json)."""
    if not path.exists():
        raise UsageError(f"{path}: no such file", hint="name a profile TOML or an scx_layered .json")
    if path.suffix == ".json":
        return _from_json(path)
    if path.suffix == ".toml":
        return _from_profile(path, shape_spec)
    raise UsageError(
        f"{path}: unknown file type {path.suffix!r}",
        hint="apply takes a profile (.toml) or an scx_layered layer config (.json)",
    )


def write_config(resolved: ResolvedConfig, target: Path) -> Path:
    target.write_text(json.dumps(resolved.specs, indent=2) + "\n")
    return target


def parse_check(scx: Path, config: Path) -> None:
    """scx_layered's own parse (`--print-and-exit`); raises InputError with its message."""
    done = subprocess.run(
        [str(scx), "--print-and-exit", f"f:{config}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        why = error_chain(done.stderr + done.stdout) or (done.stderr or done.stdout).strip()[-400:]
        raise InputError(
            f"scx_layered refused the config: {why}",
            hint="nothing was attached; fix the config (scx_layered --help lists the matchers)",
        )
