"""What `apply` hands to scx_layered: a typed layer config, from a profile or as given.

A profile TOML goes through the synthesize stage exactly as `threadwise
compile --check` would: read + validate (errors stop here, with file and
line), the machine shape (`host` reads this machine's topology, which inside
the lab VM is the guest's), compile, then scx_layered's own
`--print-and-exit` oracle, so that no option is silently dropped. A `.json`
file is read as an scx_layered layer config (a list of layer specs, or
`{"specs": [...]}`) into the same typed `LayerConfig` (unknown matchers,
kinds or options are refused with the layer's name) and parsed by
`--print-and-exit`; the shape does not apply to it. Either way scx_layered's
parser runs exactly once, and a refusal is ConfigRefused (exit 8) as from
every other command. The result is written to the run directory and the
launch uses that copy, so the applied config is what `status` shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from threadwise.errors import ConfigRefused, UsageError
from threadwise.paths import require_text

if TYPE_CHECKING:   # synthesize (pydantic) loads inside the functions: `threadwise --help` stays fast
    from threadwise.synthesize.layered import LayerConfig


@dataclass(frozen=True)
class ResolvedConfig:
    config: LayerConfig
    source: str  # the file the user named
    kind: str  # "profile" or "json"
    shape: str | None  # the shape a profile was compiled for
    notes: tuple[str, ...] = ()
    scx_args: tuple[str, ...] = ()  # scx_layered flags (a profile's [scheduler] table)

    @property
    def specs(self) -> list[dict[str, Any]]:
        """The config as scx_layered's JSON data."""
        return self.config.to_json_data()

    def layer_names(self) -> list[str]:
        return self.config.layer_names()


def _from_json(path: Path) -> ResolvedConfig:
    from threadwise.synthesize import oracle
    from threadwise.synthesize.layered import LayerConfig

    config = LayerConfig.load(path)
    oracle.print_and_exit(config)   # scx_layered's own parse; raises ConfigRefused
    return ResolvedConfig(config=config, source=str(path), kind="json", shape=None)


def _from_profile(path: Path, shape_spec: str) -> ResolvedConfig:
    from threadwise.synthesize import oracle
    from threadwise.synthesize.compile import compile_profile
    from threadwise.synthesize.rules import load_valid
    from threadwise.synthesize.shape import parse_shape

    profile = load_valid(path)   # ProfileError (file, line, rule) when invalid
    target = parse_shape(shape_spec)
    compiled = compile_profile(profile, target)
    dropped = oracle.check(compiled.config, args=compiled.scx_args)
    if dropped:
        raise ConfigRefused(
            f"{path}: scx_layered would not apply the compiled config as written: "
            + "; ".join(dropped[:3]),
            hint="this is a bug in threadwise compile; nothing was attached",
        )
    return ResolvedConfig(config=compiled.config, source=str(path), kind="profile",
                          shape=target.describe(), notes=tuple(compiled.notes),
                          scx_args=compiled.scx_args)


def resolve(path: Path, shape_spec: str = "host") -> ResolvedConfig:
    """The layer config for PROFILE (.toml) or CONFIG (.json), checked by scx_layered's parser."""
    check_input(path)
    if path.suffix == ".json":
        return _from_json(path)
    return _from_profile(path, shape_spec)


def check_input(path: Path) -> None:
    """Refuse a path that cannot be a profile or layer config: missing, a capture, another suffix."""
    if not path.exists():
        raise UsageError(f"{path}: no such file", hint="name a profile TOML or an scx_layered .json")
    require_text(path, "a profile (.toml) or an scx_layered layer config (.json)")
    if path.suffix not in (".json", ".toml"):
        raise UsageError(
            f"{path}: unknown file type {path.suffix!r}",
            hint="apply takes a profile (.toml) or an scx_layered layer config (.json)",
        )
    from threadwise.synthesize.layered import LayerConfig
    from threadwise.synthesize.rules import load_valid

    if path.suffix == ".json":
        LayerConfig.load(path)
    else:
        load_valid(path)


def write_config(resolved: ResolvedConfig, target: Path) -> Path:
    target.write_text(resolved.config.to_json())
    return target
