"""What `apply` hands to scx_layered: a typed layer config, from a profile or as given.

A profile TOML goes through the synthesize stage exactly as `threadwise
compile --check` would: read + validate (errors stop here, with file and
line), the machine shape (`host` reads this machine's topology, which inside
the lab VM is the guest's; the caller hands a typed `Shape`, parsed where the
user wrote it), compile, then scx_layered's own
`--print-and-exit` oracle, so that no option is silently dropped. A `.json`
file is read as an scx_layered layer config (a list of layer specs, or
`{"specs": [...]}`) into the same typed `LayerConfig` (unknown matchers,
kinds or options are refused with the layer's name) and parsed by
`--print-and-exit`; the shape does not apply to it. Either way scx_layered's
parser runs exactly once, and a refusal is ConfigRefused (exit 8) as from
every other command. The result is written to the run directory and the
launch uses that copy, so the applied config is what `status` shows.

The input is read and validated once (`load_input`, before apply looks at
the host, so bad input is reported wherever it runs) and the typed result,
a `Profile` or a `LayerConfig`, is passed down to `resolve_input`: no step
reads the file again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from threadwise.errors import ConfigRefused, UsageError
from threadwise.paths import require_text

if TYPE_CHECKING:   # synthesize (pydantic) loads inside the functions: `threadwise --help` stays fast
    from threadwise.runtime.hints import HintPlan
    from threadwise.shape import Shape
    from threadwise.synthesize.api import LayerConfig, Profile


@dataclass(frozen=True)
class LoadedInput:
    """PROFILE or CONFIG as `apply` read and validated it: the file and its one typed form."""

    path: Path
    content: Profile | LayerConfig


@dataclass(frozen=True)
class ResolvedConfig:
    config: LayerConfig
    source: str  # the file the user named
    kind: str  # "profile" or "json"
    shape: str | None  # the shape a profile was compiled for
    notes: tuple[str, ...] = ()
    scx_args: tuple[str, ...] = ()  # scx_layered flags (a profile's [scheduler] table)
    hint_plan: HintPlan | None = None  # title groups: what the supervisor hints (hints.py)

    def layer_names(self) -> list[str]:
        return self.config.layer_names()


def _from_json(path: Path, config: LayerConfig, scx_args: tuple[str, ...] = ()) -> ResolvedConfig:
    # deferred: synthesize's scx_layered check, which `threadwise --help` (importing this module) does without
    from threadwise.synthesize.api import print_and_exit

    print_and_exit(config, args=scx_args)   # scx_layered's own parse (flags too); ConfigRefused
    return ResolvedConfig(config=config, source=str(path), kind="json", shape=None, scx_args=scx_args)


def _from_profile(path: Path, profile: Profile, shape: Shape | None) -> ResolvedConfig:
    # deferred: shape and compile load pydantic (~80 ms); `threadwise --help` imports this module
    from threadwise.runtime.hints import plan_from
    from threadwise.shape import host_shape
    from threadwise.synthesize.api import compile_profile, oracle_check

    target = shape if shape is not None else host_shape()
    compiled = compile_profile(profile, target)
    dropped = oracle_check(compiled.config, args=compiled.scx_args)
    if dropped:
        raise ConfigRefused(
            f"{path}: scx_layered would not apply the compiled config as written: "
            + "; ".join(dropped[:3]),
            hint="this is a bug in threadwise compile; nothing was attached",
        )
    return ResolvedConfig(config=compiled.config, source=str(path), kind="profile",
                          shape=target.describe(), notes=tuple(compiled.notes),
                          scx_args=compiled.scx_args,
                          hint_plan=plan_from(profile, compiled.config, str(path)))


def resolve_input(loaded: LoadedInput, shape: Shape | None = None,
                  scx_args: tuple[str, ...] = ()) -> ResolvedConfig:
    """The layer config for an input `load_input` read, checked by scx_layered's parser.

    `shape`: the machine a profile is compiled for (None: this one's; a .json takes none).
    `scx_args`: scx_layered flags for a .json config (a ladder arm's `arms/ARM.args`); a profile's
    come from its own `[scheduler]` table, so giving both is refused."""
    # deferred: synthesize's typed config, which `threadwise --help` (importing this module) does without
    from threadwise.synthesize.api import LayerConfig

    check_scx_args(loaded, scx_args)
    if isinstance(loaded.content, LayerConfig):
        return _from_json(loaded.path, loaded.content, scx_args)
    return _from_profile(loaded.path, loaded.content, shape)


def check_scx_args(loaded: LoadedInput, scx_args: tuple[str, ...]) -> None:
    """Refuse scx_layered flags given for a profile: its own come from its [scheduler] table."""
    # deferred: synthesize's typed config, which `threadwise --help` (importing this module) does without
    from threadwise.synthesize.api import LayerConfig

    if scx_args and not isinstance(loaded.content, LayerConfig):
        raise UsageError(f"{loaded.path}: --scx-arg is for a .json layer config; a profile's scx_layered "
                         "flags come from its [scheduler] table",
                         hint="set [scheduler] interval_ms in the profile (docs/profile-schema.md)")


def load_hint_plan(loaded: LoadedInput, path: Path | None) -> HintPlan | None:
    """`apply --hint-plan`: the title hints of a .json config's HintEquals layers, read and checked
    against the config, or refused for a profile (which makes its own)."""
    # deferred: synthesize's typed config, which `threadwise --help` (importing this module) does without
    from threadwise.runtime.hints import HintPlan, hinted_layers
    from threadwise.synthesize.api import LayerConfig

    if path is None:
        return None
    if not isinstance(loaded.content, LayerConfig):
        raise UsageError(f"{loaded.path}: --hint-plan is for a .json layer config; a profile's title "
                         "groups make their own")
    try:
        plan = HintPlan.load(path)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path}: not a hint plan ({error})",
                         hint="a ladder writes one per arm with title groups: arms/ARM.hints.json") from None
    unknown = sorted(set(plan.layers) - set(hinted_layers(loaded.content)))
    if unknown:
        raise UsageError(f"{path}: hints {unknown} select no HintEquals layer of {loaded.path}")
    return plan


def resolve(path: Path, shape: Shape | None = None) -> ResolvedConfig:
    """The layer config for PROFILE (.toml, compiled for `shape`; None: this machine's) or CONFIG
    (.json), checked by scx_layered's parser."""
    return resolve_input(load_input(path), shape)


def load_input(path: Path) -> LoadedInput:
    """PROFILE or CONFIG read and validated, or refused: missing, a capture, another suffix,
    invalid (ProfileError with file, line and rule; InputError for a bad layer config)."""
    if not path.exists():
        raise UsageError(f"{path}: no such file", hint="name a profile TOML or an scx_layered .json")
    require_text(path, "a profile (.toml) or an scx_layered layer config (.json)")
    if path.suffix not in (".json", ".toml"):
        raise UsageError(
            f"{path}: unknown file type {path.suffix!r}",
            hint="apply takes a profile (.toml) or an scx_layered layer config (.json)",
        )
    # deferred: rules loads pydantic; `threadwise --help` imports this module
    from threadwise.synthesize.api import LayerConfig, load_valid

    if path.suffix == ".json":
        return LoadedInput(path, LayerConfig.load(path))
    return LoadedInput(path, load_valid(path))


def write_config(resolved: ResolvedConfig, target: Path) -> Path:
    target.write_text(resolved.config.to_json())
    return target
