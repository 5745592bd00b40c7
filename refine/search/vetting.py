"""Vetting: the gate between a search's candidate and a measurement.

Problem: a measurement costs minutes in the lab, so a candidate scx_layered would refuse, silently
drop, or place badly must be turned away before it is measured, with the reason; and what is
measured must be exactly what was checked.

Approach: synthesize's `vet_profile` checks the candidate's profile for the candidate's shape
(validation, compile, the real scx_layered oracle, placement lint) and hands back what it compiled;
this module ties the answer to the candidate: `Vetted` (its ladder arm is built from the checked
config, TOML and flags, with no second compile) or `Rejected` with the stage and reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadwise.refine.measure.ladder import Arm, check_arm_name
from threadwise.refine.search.candidate import Candidate
from threadwise.shape import Shape
from threadwise.synthesize.api import Checked, LayerConfig, OracleCheck, vet_profile

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
    answer = vet_profile(candidate.profile, candidate.shape_for(shape), check=check)
    if isinstance(answer, Checked):
        return _vetted(candidate, answer)
    compiled = _vetted(candidate, answer.compiled) if answer.compiled is not None else None
    return Rejected(candidate, answer.stage, answer.reason, compiled=compiled)


def _vetted(candidate: Candidate, checked: Checked) -> Vetted:
    return Vetted(candidate, checked.shape, checked.config, checked.notes, checked.toml, checked.args)
