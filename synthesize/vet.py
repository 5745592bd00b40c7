"""Vet a profile for a machine shape: the gate before anything measures or runs it.

Problem: a measurement costs minutes in the lab, so a profile scx_layered would refuse, silently
drop, or place badly must be turned away before it is measured, with the reason. The check takes
four of synthesize's stages (validation, compile, the scx_layered oracle, the placement lint), and
a caller that strings them together itself must know all four and compile twice (once to look, once
to measure).

Approach: `vet_profile` validates, compiles for the shape, runs the real scx_layered
`--print-and-exit` oracle on the config and the profile's scheduler flags, then lints the
placement. The first failing stage refuses, with its reason (`Refused`); a profile that passes is
`Checked`: the shape, the compiled config, the notes (compile demotions, lint warnings), the TOML
and the flags, all that a measurement needs, so nothing is compiled or written again. A profile
refused only by lint still compiled, and `Refused.compiled` carries it for a caller that measures
it anyway (a training's start profile). Compiles are kept by (the profile's TOML, shape), so the
profiles a search compiles to compare what they change are the ones it measures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from threadwise.errors import MissingTool, ThreadwiseError
from threadwise.shape import Shape
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import TREATMENT_OPTIONS, compile_profile, scx_flags
from threadwise.synthesize.layered import LayerConfig
from threadwise.synthesize.layers import views_from_profile
from threadwise.synthesize.lint import lint
from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.patterns import comm_matches, prefix_of
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Profile, Treatment
from threadwise.synthesize.writer import dumps

OracleCheck = Callable[[LayerConfig, Sequence[str]], list[str]]  # (layer config, scx_layered flags)


@dataclass(frozen=True)
class Checked:
    """A profile that may be measured for `shape`: its compiled config and what to know, with the
    TOML and the scx_layered flags it was checked with."""

    shape: Shape
    config: LayerConfig
    notes: tuple[str, ...] = ()  # compile notes (demotions) and lint warnings
    toml: str = ""
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """A profile that must not be measured: the stage that refused it (validate | compile | oracle
    | lint), and why; a profile refused only by lint still compiled (`compiled`)."""

    stage: str
    reason: str
    compiled: Checked | None = None


def toml_text(profile: Profile) -> str:
    """The profile as the reviewed TOML (the deterministic writer: a profile reads back unchanged)."""
    return dumps(profile)


def validation_errors(profile: Profile) -> list[str]:
    """The profile's validation errors (warnings are not errors), as `rule: message`: the schema's
    own checks first (a search builds candidates with `model_copy`, which runs none of them: a
    title group merged with a comm group got `match` beside `title`, and failed only when its
    TOML was read back), then the rules."""
    try:
        Profile.model_validate(profile.model_dump())
    except ValidationError as bad:
        return [f"schema: {error['msg']}" for error in bad.errors()]
    return [f"{d.rule}: {d.message}" for d in validate(profile) if d.severity == "error"]


# Compiled configs by (the profile's values, shape), bounded: a search compiles every candidate to
# drop those that change nothing compiled, then measures some of them; with this, a profile is
# compiled once for a shape in a process, whichever asks first. The key is the model's JSON
# (pydantic-core, microseconds), not the reviewed TOML: writing that costs 10-100x the compile.
_COMPILED: dict[tuple[str, Shape], tuple[LayerConfig, tuple[str, ...]]] = {}
_COMPILED_MAX = 1024


def compiled_config(profile: Profile, shape: Shape) -> tuple[LayerConfig, list[str]]:
    """The scx_layered layer config of a valid profile for `shape`, and the compile notes."""
    key = (profile.model_dump_json(), shape)
    if key not in _COMPILED:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        compiled = compile_profile(profile, shape)
        _COMPILED[key] = (compiled.config, tuple(compiled.notes))
    config, notes = _COMPILED[key]
    return config, list(notes)


def oracle_check(config: LayerConfig, args: Sequence[str] = ()) -> list[str]:
    """The real scx_layered `--print-and-exit` on the layer config and the profile's scx_layered
    flags `args`: mismatches (raises ConfigRefused if it rejects either, MissingTool without it)."""
    return oracle.check(config, args=args)


def lint_findings(profile: Profile, shape: Shape) -> tuple[list[str], list[str]]:
    """Placement lint without a capture: (errors, warnings), as `lint: message`."""
    found = lint(views_from_profile(profile, shape), shape)
    return ([f"{f.lint}: {f.message}" for f in found if f.severity == "error"],
            [f"{f.lint}: {f.message}" for f in found if f.severity != "error"])


def vet_profile(profile: Profile, shape: Shape, *, check: OracleCheck | None = None) -> Checked | Refused:
    """Validate, compile for `shape`, run the scx_layered oracle, lint: Checked, or Refused at the
    first stage that fails. `check` replaces the real oracle (tests without the binary); a missing
    scx_layered is raised (MissingTool), not blamed on the profile."""
    errors = validation_errors(profile)
    if errors:
        return Refused("validate", "; ".join(errors))
    try:
        config, notes = compiled_config(profile, shape)
    except (ThreadwiseError, AssertionError, ValueError) as bad:
        return Refused("compile", str(bad))
    args = scx_flags(profile)
    try:
        mismatches = (check or oracle_check)(config, args)
    except MissingTool:
        raise
    except ThreadwiseError as bad:
        return Refused("oracle", bad.message)
    if mismatches:
        return Refused("oracle", "scx_layered did not keep: " + "; ".join(mismatches))
    lint_errors, lint_warnings = lint_findings(profile, shape)
    checked = Checked(shape, config, tuple(notes + lint_warnings), toml_text(profile), args)
    if lint_errors:
        return Refused("lint", "; ".join(lint_errors), compiled=checked)
    return checked


# --- facts of compile a search's operators read ----------------------------------------------


def compiled_default(treatment: Treatment, option: str) -> int:
    """The option value compile gives a group of this treatment that does not set it."""
    return int(TREATMENT_OPTIONS[treatment][option])


def weight_bounds() -> tuple[int, int]:
    """scx_layered's layer weight range (the schema's too)."""
    limits = matcher_set().limits
    return limits.min_layer_weight, limits.max_layer_weight


def pattern_matches(pattern: str, comm: str) -> bool:
    """Whether a group pattern's comm prefix matches a thread name."""
    return comm_matches(prefix_of(pattern), comm)
