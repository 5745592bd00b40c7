"""Compile a profile for a machine shape into an scx_layered 1.1.4 layer config (JSON).

Problem: the profile says what each group needs (whole cores, latency, low
weight) without knowing the machine; scx_layered wants layers with kinds,
CPU ranges in logical CPUs and options, in first-match order, ending in a
catch-all. And it silently drops option keys it does not know.

Approach: one layer per group, in profile order, then the catch-all `rest`.
Every match block is [PcommPrefix(process) and/or CgroupPrefix(cgroup), CommPrefix(pattern), the group's
CommPrefixExclude..., AvgRuntime?], one block per pattern (OR); the last
group's `*` (the workload's own catch-all) has no CommPrefix.
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
(`oracle.py`) can prove each one reached scx_layered unchanged. The result is
the typed config of `layered.py` (LayerSpec / LayerKind / LayerMatch); a kind
given an option the pinned scx_layered does not have fails there, before
anything is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from threadwise.synthesize.layered import (
    KindName,
    LayerConfig,
    LayerKind,
    LayerMatch,
    LayerOptions,
    LayerSpec,
)
from threadwise.synthesize.patterns import WORKLOAD_REST, prefix_of
from threadwise.synthesize.rules import CATCH_ALL
from threadwise.synthesize.schema import Group, Profile, Treatment
from threadwise.synthesize.shape import Shape

UTIL_RANGE = (0.8, 0.9)
TREATMENT_OPTIONS: dict[Treatment, LayerOptions] = {
    Treatment.EXCLUSIVE: LayerOptions(exclusive=True, protected=True, preempt=True, slice_us=20000,
                                      weight=100),
    Treatment.LATENCY: LayerOptions(preempt=True, slice_us=1000, min_exec_us=100, weight=100),
    Treatment.BATCH: LayerOptions(slice_us=20000, weight=50),
    Treatment.HOUSEKEEPING: LayerOptions(slice_us=5000, weight=10),
    Treatment.DEFAULT: LayerOptions(slice_us=20000, weight=100),
}
# A demoted CPU hog must not preempt: with no cores of its own it would take
# every CPU from everything else (seen in the lab: two demoted rolesim spinners
# at 194 % of 2 vCPUs, a `threadwise status` in the catch-all took 5 minutes).
DEMOTED_OPTIONS = LayerOptions(preempt=False, slice_us=20000, weight=100)
CATCH_ALL_OPTIONS = LayerOptions(slice_us=20000, weight=100)


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

    config: LayerConfig
    plans: list[LayerPlan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def specs(self) -> list[dict[str, Any]]:
        """The config as scx_layered's JSON data (a list of layer objects)."""
        return self.config.to_json_data()

    def to_json(self) -> str:
        return self.config.to_json()


def match_blocks(profile: Profile, group: Group) -> tuple[tuple[LayerMatch, ...], ...]:
    """The OR blocks of AND-ed matches for one group."""
    blocks = []
    workload: list[LayerMatch] = []
    if profile.workload.process is not None:
        workload.append(LayerMatch.pcomm_prefix(profile.workload.process))
    if profile.workload.cgroup is not None:
        workload.append(LayerMatch.cgroup_prefix(profile.workload.cgroup))
    for pattern in group.match:
        block = list(workload)
        if pattern != WORKLOAD_REST:   # `*`: every other thread of the workload
            block.append(LayerMatch.comm_prefix(prefix_of(pattern)))
        block += [LayerMatch.comm_prefix_exclude(prefix_of(e)) for e in group.exclude]
        if group.avg_runtime_us is not None:
            block.append(LayerMatch.avg_runtime(*group.avg_runtime_us))
        blocks.append(tuple(block))
    return tuple(blocks)


def _options(group: Group, base: LayerOptions, **fixed: Any) -> LayerOptions:
    """`base` with the group's own slice_us / weight, and `fixed` (sizes) set."""
    overrides = {k: v for k, v in (("slice_us", group.slice_us), ("weight", group.weight)) if v is not None}
    return replace(base, **fixed, **overrides)


def _exclusive(group: Group, shape: Shape, budget: int,
               result: Compiled) -> tuple[LayerKind, str, int]:
    """The layer kind of an exclusive group, its comment, and the cores left after it."""
    cores = group.exclusive_cores()
    tpc = shape.threads_per_core
    if cores <= budget:
        result.plans.append(LayerPlan(group.name, KindName.CONFINED.value, cores))
        kind = LayerKind(KindName.CONFINED, _options(group, TREATMENT_OPTIONS[Treatment.EXCLUSIVE],
                                                      util_range=UTIL_RANGE, cpus_range=(cores * tpc,) * 2))
        return kind, f", {cores} whole cores ({cores * tpc} CPUs)", budget - cores
    earlier = " - earlier exclusive groups" if budget < shape.exclusive_budget else ""
    reason = (f"needs {cores} whole cores, the shape has {budget} left "
              f"({shape.cores} cores - {shape.reserve_cores} reserved{earlier})")
    result.plans.append(LayerPlan(group.name, KindName.GROUPED.value, 0, True, reason))
    result.notes.append(f"group {group.name!r} demoted from exclusive (Confined) to Grouped: "
                        f"{reason}")
    kind = LayerKind(KindName.GROUPED, _options(group, DEMOTED_OPTIONS, util_range=UTIL_RANGE))
    return kind, f", demoted to Grouped: {reason}", budget


def compile_profile(profile: Profile, shape: Shape) -> Compiled:
    """The scx_layered layer config of `profile` on `shape` (profile must be valid)."""
    result = Compiled(LayerConfig(()))
    captured = profile.source.nr_cpus if profile.source else None
    if captured and shape.nr_cpus > captured:
        result.notes.append(
            f"compiled for {shape.nr_cpus} CPUs, but the capture ran on {captured}: shares, "
            "contention and hot threads were measured on a smaller machine; capture on this "
            "shape before trusting the sizing")
    specs: list[LayerSpec] = []
    budget = shape.exclusive_budget
    for group in profile.groups:
        comment = f"threadwise {profile.name}/{group.name}: {group.treatment.value}"
        if group.treatment is Treatment.EXCLUSIVE:
            kind, detail, budget = _exclusive(group, shape, budget, result)
            comment += detail
        else:
            kind = LayerKind(KindName.OPEN, _options(group, TREATMENT_OPTIONS[group.treatment]))
            result.plans.append(LayerPlan(group.name, KindName.OPEN.value))
        specs.append(LayerSpec(group.name, match_blocks(profile, group), kind, comment))
    specs.append(LayerSpec(CATCH_ALL, ((),), LayerKind(KindName.OPEN, CATCH_ALL_OPTIONS),
                           f"threadwise {profile.name}: everything else (catch-all)"))
    result.config = LayerConfig(tuple(specs))
    return result
