"""Vetting: the gate between a candidate and a measurement, and refine's calls into synthesize.

Problem: a measurement costs minutes in the lab, so a candidate scx_layered would refuse, silently
drop, or place badly must be turned away before it is measured, with the reason; and the search's
operators need a few facts from synthesize (the TOML writer, validation, compile, the matcher
set's limits) without each reaching into synthesize's modules.

Approach: `vet` validates (synthesize's rules), compiles for the candidate's shape, runs the real
scx_layered `--print-and-exit` oracle on the config and the profile's flags, then lints the
placement; the first failing stage rejects, with its reason (`Rejected`), and a candidate that
passes is `Vetted`: its shape, compiled config and notes. Every call into synthesize goes through
the small adapter section below, so that synthesize can change shape without touching the
operators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from threadwise.errors import MissingTool, ThreadwiseError
from threadwise.refine.measure.ladder import Arm, check_arm_name
from threadwise.refine.search.candidate import Candidate
from threadwise.shape import Shape
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import TREATMENT_OPTIONS, compile_profile
from threadwise.synthesize.layered import LayerConfig
from threadwise.synthesize.layers import views_from_profile
from threadwise.synthesize.lint import lint
from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.patterns import comm_matches, prefix_of
from threadwise.synthesize.presets import scheduler_args
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Profile, Treatment
from threadwise.synthesize.writer import dumps

OracleCheck = Callable[[LayerConfig, Sequence[str]], list[str]]  # (layer config, scx_layered flags)

# --- synthesize, in one place -----------------------------------------------------------------


def toml_text(profile: Profile) -> str:
    """The profile as the reviewed TOML (synthesize's deterministic writer)."""
    return dumps(profile)


def validation_errors(profile: Profile) -> list[str]:
    """synthesize's validation errors (warnings are not errors), as `rule: message`."""
    return [f"{d.rule}: {d.message}" for d in validate(profile) if d.severity == "error"]


# Compiled configs by (the profile's TOML, shape): the operators compile every candidate to drop
# those that change nothing compiled (mutate._key), and vet compiles the one the search measures;
# with this, a profile is compiled once for a shape in a process, whichever asks first. The TOML is
# the profile's canonical form (synthesize's writer: a profile reads back from it unchanged).
_COMPILED: dict[tuple[str, Shape], tuple[LayerConfig, tuple[str, ...]]] = {}
_COMPILED_MAX = 1024


def compile_config(profile: Profile, shape: Shape) -> tuple[LayerConfig, list[str]]:
    """The scx_layered layer config of a valid profile, and the compile notes."""
    key = (toml_text(profile), shape)
    if key not in _COMPILED:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        compiled = compile_profile(profile, shape)
        _COMPILED[key] = (compiled.config, tuple(compiled.notes))
    config, notes = _COMPILED[key]
    return config, list(notes)


def oracle_check(config: LayerConfig, args: Sequence[str] = ()) -> list[str]:
    """The real scx_layered `--print-and-exit` on the layer config and the profile's scx_layered
    flags `args`: mismatches (raises if it rejects either)."""
    return oracle.check(config, args=args)


def lint_findings(profile: Profile, shape: Shape) -> tuple[list[str], list[str]]:
    """Placement lint without a capture: (errors, warnings), as `lint: message`."""
    found = lint(views_from_profile(profile, shape), shape)
    return ([f"{f.lint}: {f.message}" for f in found if f.severity == "error"],
            [f"{f.lint}: {f.message}" for f in found if f.severity != "error"])


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


# --- the gate ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vetted:
    """A candidate that may be measured: its shape, compiled config, and what to know; with the
    TOML and the scx_layered flags it was vetted with, so its ladder arm is built from exactly what
    was checked (`arm`), with no second compile."""

    candidate: Candidate
    shape: Shape
    config: LayerConfig
    notes: tuple[str, ...] = ()  # compile notes (demotions) and lint warnings
    toml: str = ""
    args: tuple[str, ...] = ()

    def arm(self, name: str) -> Arm:
        """The ladder arm that measures this candidate as `name`."""
        return Arm(check_arm_name(name), self.toml, self.config, self.args)


@dataclass(frozen=True)
class Rejected:
    """A candidate that must not be measured: the stage that refused it, and why; a profile refused
    only by lint still compiled (`compiled`: what a caller measuring it anyway needs)."""

    candidate: Candidate
    stage: str  # validate | compile | oracle | lint
    reason: str
    compiled: Vetted | None = None



def vet(candidate: Candidate, shape: Shape, *, check: OracleCheck | None = None) -> Vetted | Rejected:
    """Validate, compile for the candidate's shape, run the scx_layered oracle, lint.

    `check` replaces the real oracle (tests without the binary); a missing
    scx_layered is raised (MissingTool), not blamed on the candidate.
    """
    machine = candidate.shape_for(shape)
    errors = validation_errors(candidate.profile)
    if errors:
        return Rejected(candidate, "validate", "; ".join(errors))
    try:
        config, notes = compile_config(candidate.profile, machine)
    except (ThreadwiseError, AssertionError, ValueError) as bad:
        return Rejected(candidate, "compile", str(bad))
    args = tuple(scheduler_args(candidate.profile))
    try:
        mismatches = (check or oracle_check)(config, args)
    except MissingTool:
        raise
    except ThreadwiseError as bad:
        return Rejected(candidate, "oracle", bad.message)
    if mismatches:
        return Rejected(candidate, "oracle", "scx_layered did not keep: " + "; ".join(mismatches))
    lint_errors, lint_warnings = lint_findings(candidate.profile, machine)
    vetted = Vetted(candidate, machine, config, tuple(notes + lint_warnings), toml_text(candidate.profile),
                    args)
    if lint_errors:
        return Rejected(candidate, "lint", "; ".join(lint_errors), compiled=vetted)
    return vetted
