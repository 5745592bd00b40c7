"""Compile a profile for a machine shape into an scx_layered 1.1.4 layer config (JSON).

Problem: the profile says what each group needs (whole cores, latency, low
weight) without knowing the machine; scx_layered wants layers with kinds,
CPU ranges in logical CPUs and options, in first-match order, ending in a
catch-all. And it silently drops option keys it does not know.

Approach: one layer per group, in profile order, then the catch-all `rest`; groups selected
by process title (`title = [...]`) go first, each a layer matched by `HintEquals(N)` alone (N =
1, 2, ... in profile order; scx_layered allows no other matcher beside it, and its hint path
and its in-order re-match must agree), then the hinted default layer `untitled`
(`HintEquals(1024)`, the catch-all's options): the hint the runtime writes to move a process
back, since deleting a hint moves nothing. `Compiled.hints` maps each title pattern to its
hint, and the scx_layered flags carry `--task-hint-map PATH`, without which no hint matches.
Every match block is [PcommPrefix(process) and/or CgroupPrefix(cgroup), CommPrefix(pattern), the group's
CommPrefixExclude..., UIDEquals(uid)?, AvgRuntime?], one block per pattern (OR); the last
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
The presets are `presets.py`; a group's option keys (slice_us, weight, preempt,
preempt_first, exclusive, protected, min_exec_us, disallow_preempt_after_us)
override its preset (a demoted group's too), and `[catch_all]` overrides the
catch-all's. Every option is set explicitly (weight, slice_us), so that the oracle check
(`oracle.py`) can prove each one reached scx_layered unchanged. The result is
the typed config of `layered.py` (LayerSpec / LayerKind / LayerMatch); a kind
given an option the pinned scx_layered does not have fails there, before
anything is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from threadwise.shape import Shape
from threadwise.synthesize.layered import (
    KindName,
    LayerConfig,
    LayerKind,
    LayerMatch,
    LayerOptions,
    LayerSpec,
)
from threadwise.synthesize.patterns import WORKLOAD_REST, prefix_of
from threadwise.synthesize.presets import (
    CATCH_ALL_OPTIONS,
    DEMOTED_OPTIONS,
    TREATMENT_OPTIONS,
    UTIL_RANGE,
    scheduler_args,
    with_overrides,
)
from threadwise.synthesize.rules import CATCH_ALL, HINT_DEFAULT
from threadwise.synthesize.schema import CatchAll, Group, Profile, Treatment

# The hint of the hinted default layer: the largest scx_layered reads (hints above are ignored).
HINT_DEFAULT_VALUE = 1024
# Where scx_layered pins its task-hint map (`--task-hint-map`); the runtime may give its own.
TASK_HINT_MAP = "/sys/fs/bpf/threadwise/task_hint_map"

__all__ = ["CATCH_ALL_OPTIONS", "DEMOTED_OPTIONS", "TREATMENT_OPTIONS", "UTIL_RANGE", "Compiled", "LayerPlan",
           "compile_null", "compile_profile", "layer_order", "match_blocks", "scx_flags", "title_hints"]


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
    scx_args: tuple[str, ...] = ()   # scx_layered flags of the profile's [scheduler] table
    hints: dict[str, int] = field(default_factory=dict)   # title pattern -> its layer's hint
    default_hint: int | None = None  # the hint of the hinted default layer (None: no title group)

    def to_json(self) -> str:
        """The config as the JSON text scx_layered reads (the one serialisation, for a file)."""
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
        if group.uid is not None:
            block.append(LayerMatch.uid_equals(group.uid))
        bounds = group.avg_runtime_bounds()
        if bounds is not None:
            block.append(LayerMatch.avg_runtime(*bounds))
        blocks.append(tuple(block))
    return tuple(blocks)


def _demoted_notes(group: Group, options: LayerOptions) -> list[str]:
    """What a demoted group's own overrides mean on its Grouped layer."""
    notes = []
    if options.preempt:
        notes.append(f"group {group.name!r}: the demoted layer keeps preempt = true from the profile: a "
                     "CPU hog without cores of its own that preempts can take every CPU from the rest")
    if options.preempt_first and not options.preempt:
        notes.append(f"group {group.name!r}: preempt_first has no effect on the demoted layer "
                     "(it does not preempt)")
    return notes


def _exclusive(group: Group, shape: Shape, budget: int,
               result: Compiled) -> tuple[LayerKind, str, int]:
    """The layer kind of an exclusive group, its comment, and the cores left after it."""
    cores = group.exclusive_cores()
    tpc = shape.threads_per_core
    if cores <= budget:
        result.plans.append(LayerPlan(group.name, KindName.CONFINED.value, cores))
        options = with_overrides(TREATMENT_OPTIONS[Treatment.EXCLUSIVE], group, util_range=UTIL_RANGE,
                                 cpus_range=(cores * tpc,) * 2)
        kind = LayerKind(KindName.CONFINED, options)
        return kind, f", {cores} whole cores ({cores * tpc} CPUs)", budget - cores
    earlier = " - earlier exclusive groups" if budget < shape.exclusive_budget else ""
    reason = (f"needs {cores} whole cores, the shape has {budget} left "
              f"({shape.cores} cores - {shape.reserve_cores} reserved{earlier})")
    result.plans.append(LayerPlan(group.name, KindName.GROUPED.value, 0, True, reason))
    result.notes.append(f"group {group.name!r} demoted from exclusive (Confined) to Grouped: "
                        f"{reason}")
    options = with_overrides(DEMOTED_OPTIONS, group, util_range=UTIL_RANGE)
    result.notes += _demoted_notes(group, options)
    kind = LayerKind(KindName.GROUPED, options)
    return kind, f", demoted to Grouped: {reason}", budget


def compile_profile(profile: Profile, shape: Shape) -> Compiled:
    """The scx_layered layer config of `profile` on `shape` (profile must be valid)."""
    result = Compiled(LayerConfig(()), scx_args=scx_flags(profile))
    captured = profile.source.nr_cpus if profile.source else None
    if captured and shape.nr_cpus > captured:
        result.notes.append(
            f"compiled for {shape.nr_cpus} CPUs, but the capture ran on {captured}: shares, "
            "contention and hot threads were measured on a smaller machine; capture on this "
            "shape before trusting the sizing")
    specs: list[LayerSpec] = []
    budget = shape.exclusive_budget
    hint_of = title_hints(profile)
    catch_all = with_overrides(CATCH_ALL_OPTIONS, profile.catch_all or CatchAll())
    for group in layer_order(profile):
        comment = f"threadwise {profile.name}/{group.name}: {group.treatment.value}"
        if group.treatment is Treatment.EXCLUSIVE:
            kind, detail, budget = _exclusive(group, shape, budget, result)
            comment += detail
        else:
            kind = LayerKind(KindName.OPEN, with_overrides(TREATMENT_OPTIONS[group.treatment], group))
            result.plans.append(LayerPlan(group.name, KindName.OPEN.value))
        if group.title:
            hint = hint_of[group.title[0]]
            comment += f"; hint {hint} = title {', '.join(map(repr, group.title))}"
            blocks: tuple[tuple[LayerMatch, ...], ...] = ((LayerMatch.hint_equals(hint),),)
        else:
            blocks = match_blocks(profile, group)
        specs.append(LayerSpec(group.name, blocks, kind, comment))
    if hint_of:
        # the hinted default layer right after the title groups (layer_order puts them first)
        specs.insert(len(_titled(profile)), _hint_default(profile, catch_all))
        result.hints, result.default_hint = hint_of, HINT_DEFAULT_VALUE
    specs.append(LayerSpec(CATCH_ALL, ((),), LayerKind(KindName.OPEN, catch_all),
                           f"threadwise {profile.name}: everything else (catch-all)"))
    result.config = LayerConfig(tuple(specs))
    return result


def scx_flags(profile: Profile) -> tuple[str, ...]:
    """scx_layered's flags for `profile`: its [scheduler] table's, and `--task-hint-map` when a
    group is selected by title (without it no hint matches). Compile and vet both use these, so a
    ladder arm runs with the flags its config was checked with."""
    hinted = ("--task-hint-map", TASK_HINT_MAP) if _titled(profile) else ()
    return (*scheduler_args(profile), *hinted)


def _titled(profile: Profile) -> list[Group]:
    return [g for g in profile.groups if g.title]


def layer_order(profile: Profile) -> list[Group]:
    """The groups in layer order: those selected by title first (hinted layers must come first:
    scx_layered's in-order re-match and its hint path would disagree otherwise), then the rest,
    each part in profile order. The hinted default layer follows the title groups."""
    return [*_titled(profile), *(g for g in profile.groups if not g.title)]


def title_hints(profile: Profile) -> dict[str, int]:
    """Title pattern -> the hint of its group's layer (1, 2, ... in profile order): what the
    runtime writes into the task-hint map for a process whose title the pattern selects."""
    return {pattern: n for n, group in enumerate(_titled(profile), start=1) for pattern in group.title}


def _hint_default(profile: Profile, options: LayerOptions) -> LayerSpec:
    return LayerSpec(HINT_DEFAULT, ((LayerMatch.hint_equals(HINT_DEFAULT_VALUE),),),
                     LayerKind(KindName.OPEN, options),
                     f"threadwise {profile.name}: hint {HINT_DEFAULT_VALUE} = no title group's; the "
                     "catch-all's options (a hint no layer uses would not move a process back)")


def compile_null(profile: Profile) -> Compiled:
    """The null config of `profile`: the same scx_layered with the same flags, and the catch-all
    layer alone (its preset options, none of the profile's), so every thread runs in it.

    Measured beside the profile it tells what any scx_layered config costs the workload from what
    the profile's layers cost (docs/search.md "The null arm"): on memcached under TCG a config of
    no group cost 5% at bg=0 and 43% at bg=4, as much as the record's candidate (issue 50)."""
    spec = LayerSpec(CATCH_ALL, ((),), LayerKind(KindName.OPEN, CATCH_ALL_OPTIONS),
                     f"threadwise {profile.name}: null config, every thread in the catch-all")
    return Compiled(LayerConfig((spec,)), scx_args=scheduler_args(profile))
