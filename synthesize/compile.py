"""Compile a profile for a machine shape into an scx_layered 1.1.4 layer config (JSON).

Problem: the profile says what each group needs (whole cores, latency, low
weight) without knowing the machine; scx_layered wants layers with kinds,
CPU ranges in logical CPUs and options, in first-match order, ending in a
catch-all. And it silently drops option keys it does not know.

Approach: one layer per group, in profile order, then the catch-all `rest`.
Every match block is [PcommPrefix(process), CommPrefix(pattern), the group's
CommPrefixExclude..., AvgRuntime?], one block per pattern (OR).
- exclusive: Confined, `exclusive` and `protected`, cpus_range fixed at
  cores x threads-per-core, so it is allocated whole physical cores with their
  SMT siblings kept idle. Cores are handed out in profile order from the
  shape's budget (cores minus reserve); a group whose whole-core demand does
  not fit what is left is demoted to a Grouped layer (utilisation-sized, not
  preempting: a hog without cores of its own must not take every CPU from the
  rest) and the layer's comment and the notes say so.
- latency: Open, preempt, short slices. batch / housekeeping: Open, low
  weight. default: Open with scx_layered's defaults set explicitly.
Every option is set explicitly (weight, slice_us), so that the oracle check
(`oracle.py`) can prove each one reached scx_layered unchanged. The option
keys used are checked against the matcher set data before anything is emitted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.patterns import prefix_of
from threadwise.synthesize.rules import CATCH_ALL
from threadwise.synthesize.schema import Group, Profile, Treatment
from threadwise.synthesize.shape import Shape

UTIL_RANGE = (0.8, 0.9)
TREATMENT_OPTIONS: dict[Treatment, dict[str, Any]] = {
    Treatment.EXCLUSIVE: {"exclusive": True, "protected": True, "preempt": True,
                          "slice_us": 20000, "weight": 100},
    Treatment.LATENCY: {"preempt": True, "slice_us": 1000, "min_exec_us": 100, "weight": 100},
    Treatment.BATCH: {"slice_us": 20000, "weight": 50},
    Treatment.HOUSEKEEPING: {"slice_us": 5000, "weight": 10},
    Treatment.DEFAULT: {"slice_us": 20000, "weight": 100},
}
# A demoted CPU hog must not preempt: with no cores of its own it would take
# every CPU from everything else (seen in the lab: two demoted rolesim spinners
# at 194 % of 2 vCPUs, a `threadwise status` in the catch-all took 5 minutes).
DEMOTED_OPTIONS: dict[str, Any] = {"preempt": False, "slice_us": 20000, "weight": 100}
CATCH_ALL_OPTIONS: dict[str, Any] = {"slice_us": 20000, "weight": 100}


@dataclass(frozen=True)
class LayerPlan:
    """How one group became a layer (for notes and lint)."""

    group: str
    kind: str
    cores: int = 0
    demoted: bool = False
    reason: str = ""


@dataclass
class Compiled:
    """The layer config and what happened while making it."""

    specs: list[dict[str, Any]]
    plans: list[LayerPlan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.specs, indent=2) + "\n"


def match_blocks(profile: Profile, group: Group) -> list[list[dict[str, Any]]]:
    """The OR blocks of AND-ed matches for one group."""
    blocks = []
    for pattern in group.match:
        block: list[dict[str, Any]] = [{"PcommPrefix": profile.workload.process},
                                       {"CommPrefix": prefix_of(pattern)}]
        block += [{"CommPrefixExclude": prefix_of(e)} for e in group.exclude]
        if group.avg_runtime_us is not None:
            block.append({"AvgRuntime": list(group.avg_runtime_us)})
        blocks.append(block)
    return blocks


def _options(group: Group, base: dict[str, Any]) -> dict[str, Any]:
    options = dict(base)
    if group.slice_us is not None:
        options["slice_us"] = group.slice_us
    if group.weight is not None:
        options["weight"] = group.weight
    return options


def _exclusive(group: Group, shape: Shape, budget: int,
               result: Compiled) -> tuple[dict[str, Any], str, int]:
    """The layer kind of an exclusive group, its comment, and the cores left after it."""
    cores = group.exclusive_cores()
    tpc = shape.threads_per_core
    if cores <= budget:
        result.plans.append(LayerPlan(group.name, "Confined", cores))
        kind = {"Confined": {"util_range": list(UTIL_RANGE), "cpus_range": [cores * tpc] * 2,
                             **_options(group, TREATMENT_OPTIONS[Treatment.EXCLUSIVE])}}
        return kind, f", {cores} whole cores ({cores * tpc} CPUs)", budget - cores
    earlier = " - earlier exclusive groups" if budget < shape.exclusive_budget else ""
    reason = (f"needs {cores} whole cores, the shape has {budget} left "
              f"({shape.cores} cores - {shape.reserve_cores} reserved{earlier})")
    result.plans.append(LayerPlan(group.name, "Grouped", 0, True, reason))
    result.notes.append(f"group {group.name!r} demoted from exclusive (Confined) to Grouped: "
                        f"{reason}")
    kind = {"Grouped": {"util_range": list(UTIL_RANGE), **_options(group, DEMOTED_OPTIONS)}}
    return kind, f", demoted to Grouped: {reason}", budget


def compile_profile(profile: Profile, shape: Shape) -> Compiled:
    """The scx_layered layer config of `profile` on `shape` (profile must be valid)."""
    result = Compiled([])
    budget = shape.exclusive_budget
    for group in profile.groups:
        comment = f"threadwise {profile.name}/{group.name}: {group.treatment.value}"
        if group.treatment is Treatment.EXCLUSIVE:
            kind, detail, budget = _exclusive(group, shape, budget, result)
            comment += detail
        else:
            kind = {"Open": _options(group, TREATMENT_OPTIONS[group.treatment])}
            result.plans.append(LayerPlan(group.name, "Open"))
        result.specs.append({"name": group.name, "comment": comment,
                             "matches": match_blocks(profile, group), "kind": kind})
    result.specs.append({"name": CATCH_ALL,
                         "comment": f"threadwise {profile.name}: everything else (catch-all)",
                         "matches": [[]], "kind": {"Open": dict(CATCH_ALL_OPTIONS)}})
    _check_keys(result.specs)
    return result


def _check_keys(specs: list[dict[str, Any]]) -> None:
    """Fail loudly if we emit an option or matcher the pinned scx_layered does not know."""
    known = matcher_set()
    for spec in specs:
        for kind, options in spec["kind"].items():
            unknown = set(options) - known.kind_options(kind)
            if unknown:
                raise AssertionError(f"compile emits unknown {kind} options {sorted(unknown)}")
        for block in spec["matches"]:
            for match in block:
                if set(match) - set(known.matchers):
                    raise AssertionError(f"compile emits unknown matcher {match}")
