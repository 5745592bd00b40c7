"""Treatment presets: the scx_layered options each treatment compiles to, and a profile's overrides.

Problem: a treatment (exclusive, latency, ...) is a preset of scx_layered
layer options, but the lab showed the presets are not always right (a preempt
task cannot preempt another preempt task, an exclusive layer's CPUs are
`protected`, the catch-all's slice is fixed), so a group may override single
options, and the catch-all layer has options of its own.

Approach: the presets are data here (compile, validation, the writer's
comments and refine's mutations read them); a group's or the catch-all's
overrides are the profile keys named after the scx_layered 1.1.4 option they
set (`OPTION_KEYS`, the same name in config.rs `LayerCommon` / `LayerKind`),
laid over the preset with `with_overrides`. `scx_default` is what scx_layered
itself uses when a key is absent, so a reviewer sees what an override replaces.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from threadwise.scx import interval_args
from threadwise.synthesize.layered import LayerOptions
from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.schema import OPTION_KEYS, CatchAll, Group, Profile, Treatment

UTIL_RANGE = (0.8, 0.9)
# Re-derived from lab ladders (rolesim, 2 vCPUs, TCG; docs/profile-schema.md "Presets: the evidence"):
# - exclusive: no preempt. A preempting exclusive task pushed off its CPU lands on a shared CPU
#   with a full slice (1.1.4's enqueue preempt path does not check confinement), and a preempt
#   task cannot preempt another: worker p99 23 ms in every cell. preempt=false gave 1.3-2.1 ms.
# - exclusive slice 2 ms (was 20 ms): a slice the exclusive thread still runs outside its
#   cores (the placement test saw it) now holds a shared CPU for 2 ms, not 20.
# - the catch-all's slice 2 ms (was 20 ms): how long an unrelated thread holds a CPU a waking
#   latency thread wants.
TREATMENT_OPTIONS: dict[Treatment, LayerOptions] = {
    Treatment.EXCLUSIVE: LayerOptions(exclusive=True, protected=True, preempt=False, slice_us=2000,
                                      weight=100),
    Treatment.LATENCY: LayerOptions(preempt=True, slice_us=1000, min_exec_us=100, weight=100),
    Treatment.BATCH: LayerOptions(slice_us=20000, weight=50),
    Treatment.HOUSEKEEPING: LayerOptions(slice_us=5000, weight=10),
    Treatment.DEFAULT: LayerOptions(slice_us=20000, weight=100),
}
# scx_layered's userspace step (--interval) every 5 s, not its 0.1 s: the step runs ahead of
# every layer and, under TCG, holds a CPU 3-5 ms each time (traced in the lab: the top blocker
# of rolesim's waiting workers at bg=0). An exclusive group's Confined layer is sized once
# (cpus_range min = max), so it loses nothing; a demoted (Grouped) layer re-sizes at each step, so
# it follows a load change within 5 s instead of 0.1 s. Measured (rolesim, bg=0): worker p99
# ~1-2 ms at 0.1 s, 0.1-0.3 ms at 5 s.
SCHEDULER_INTERVAL_MS = 5000
# A demoted CPU hog must not preempt: with no cores of its own it would take
# every CPU from everything else (seen in the lab: two demoted rolesim spinners
# at 194 % of 2 vCPUs, a `threadwise status` in the catch-all took 5 minutes).
DEMOTED_OPTIONS = LayerOptions(preempt=False, slice_us=20000, weight=100)
CATCH_ALL_OPTIONS = LayerOptions(slice_us=2000, weight=100)

# scx_layered 1.1.4's own value of each override key when a layer leaves it out
# (serde defaults in config.rs; slice_us 0 -> --slice-us, weight 0 -> 100 and
# disallow_preempt_after_us None -> 4 x SCX_SLICE_DFL (20 ms) in main.rs).
_SCX_DEFAULTS: dict[str, Any] = {
    "preempt": False, "preempt_first": False, "exclusive": False, "protected": False,
    "min_exec_us": 0, "disallow_preempt_after_us": 80_000,
}


def scx_default(key: str) -> Any:
    """What scx_layered 1.1.4 uses for option `key` when the layer does not set it."""
    limits = matcher_set().limits
    return {"slice_us": limits.default_slice_us, "weight": limits.default_layer_weight,
            **_SCX_DEFAULTS}[key]


def overrides(item: Group | CatchAll) -> dict[str, Any]:
    """The option keys a group (or the catch-all) sets, in schema order."""
    return {key: getattr(item, key) for key in OPTION_KEYS
            if key in type(item).model_fields and getattr(item, key) is not None}


def with_overrides(base: LayerOptions, item: Group | CatchAll, **fixed: Any) -> LayerOptions:
    """`base` (a preset) with `fixed` (sizes) and the item's own overrides laid over it."""
    return replace(base, **fixed, **overrides(item))


def preset_value(base: LayerOptions, key: str) -> Any:
    """The value of option `key` a preset gives a layer (scx_layered's default if it sets none)."""
    value = getattr(base, key)
    return scx_default(key) if value is None else value


def effective(item: Group | CatchAll, key: str) -> Any:
    """Option `key` of the layer a group (when it is not demoted) or the catch-all compiles to:
    its override, else its preset."""
    value = getattr(item, key)
    if value is not None:
        return value
    return preset_value(TREATMENT_OPTIONS[item.treatment] if isinstance(item, Group) else CATCH_ALL_OPTIONS,
                        key)


def scheduler_interval_ms(profile: Profile) -> int:
    """scx_layered's --interval in ms for `profile`: its [scheduler] table's, else the preset."""
    table = profile.scheduler
    return table.interval_ms if table is not None and table.interval_ms is not None \
        else SCHEDULER_INTERVAL_MS


def scheduler_args(profile: Profile) -> tuple[str, ...]:
    """scx_layered's command-line flags for `profile`: its [scheduler] table over the preset."""
    return interval_args(scheduler_interval_ms(profile))   # spelled by threadwise.scx
