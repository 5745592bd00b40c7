"""Option mutations: the scx_layered layer options that decide who holds a CPU when a thread wakes.

Problem: a latency metric that regressed against the default scheduler (the
lab's rolesim worker p99 at bg=0) is decided less by a group's treatment than
by single options of the layers around it: whether a waking task may take a
busy CPU (`preempt`), how long a task keeps one (`slice_us`), whether an
exclusive layer's CPUs run anything else (`protected`). The profile overrides
them per group and for the catch-all (docs/profile-schema.md), so the search
needs operators that change them one at a time.

Approach: each operator reads the layer options the parent profile COMPILES
to for the shape (so a demoted exclusive group is seen as the Grouped,
non-preempting layer it is) and offers the values scx_layered 1.1.4 acts on:
- `preempts`: a group's `preempt` off where its layer preempts, on where it
  does not; never on for a demoted (Grouped) exclusive group, a CPU hog that
  would then take every CPU (presets.DEMOTED_OPTIONS). Turning it off also
  drops `preempt_first` (which needs it), turning it on drops
  `disallow_preempt_after_us` (1.1.4 ignores it on a preempting layer);
- `preempt_firsts`: `preempt_first` toggled on a preempting Open layer (it
  needs `preempt`; exclusive layers' threads run rather than wake);
- `protections`: `protected` off for an exclusive group's Confined layer
  (`protected` exists only on Confined and Grouped layers; a demoted Grouped
  layer is not protected by its preset);
- `preemptible_owners`: an exclusive group's Confined CPUs opened to waking
  threads of preempting layers however long they have been busy: `protected`
  off and `disallow_preempt_after_us` at MAX_US ("never", one change, since
  the second needs the first). 1.1.4 stops preempting an owned CPU once it has
  been busy `disallow_preempt_after_us` (80 ms by default) without idling
  (`protect_owned_preempt` in `layered_stopping`, checked in `try_preempt_cpu`),
  which a spinning hot thread always is: `protected` off alone left rolesim's
  workers queued behind the feeder on the one shared CPU (blocker rows, 2,412
  waits at bg=0), with it they preempted hot-0 (2,310 waits behind it, p99 at
  bg=0 from 12x the default's to 1.7x; docs/profile-schema.md);
- `sharings`: `exclusive` off for an exclusive group's Confined layer (what
  owning a CPU costs its own threads with no background: rolesim's hot);
- `exclusive_slices`: slice_us 1000 and 2000 for an exclusive group, the
  latency scale (mutate.slices' halving from 20 ms would take four steps);
- `catch_all_options`: the catch-all's slice_us halved and 2000, and its
  `preempt` toggled. Its weight is not offered: the catch-all is an Open
  layer, whose weight 1.1.4's BPF never reads.
`dropped_overrides` says which overrides a group must lose with a new
treatment (mutate.treatments), so that no operator returns a profile that
rules.py `layer_option` rejects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from threadwise.errors import ThreadwiseError
from threadwise.refine.search.candidate import Candidate, changed
from threadwise.shape import Shape
from threadwise.synthesize.api import (
    MAX_US,
    CatchAll,
    Group,
    KindName,
    LayerKind,
    Profile,
    Scheduler,
    Treatment,
    compiled_config,
    effective,
    scheduler_interval_ms,
)

# the catch-all layer's name in compiled configs (compile.CATCH_ALL; "rest" is reserved for it)
CATCH_ALL = "rest"
EXCLUSIVE_SLICES_US = (1000, 2000)
CATCH_ALL_SHORT_SLICE_US = 2000


def compiled_layers(profile: Profile, shape: Shape) -> dict[str, LayerKind]:
    """Layer name -> its kind (with options) as the profile compiles for the shape ({} if it does not)."""
    try:
        config, _notes = compiled_config(profile, shape)
    except (ThreadwiseError, AssertionError, ValueError):
        return {}
    return {spec.name: spec.kind for spec in config}


def dropped_overrides(group: Group, treatment: Treatment) -> list[str]:
    """Option overrides a group cannot keep under `treatment` (rules.py `layer_option`): the
    options of CPU-owning layers outside exclusive, preempt_first where the layer stops preempting."""
    dropped = []
    if treatment is not Treatment.EXCLUSIVE:
        dropped = [k for k in ("protected", "disallow_preempt_after_us") if getattr(group, k) is not None]
        dropped += ["exclusive"] if group.exclusive else []
    moved = group.model_copy(update={"treatment": treatment, **dict.fromkeys(dropped)})
    if moved.preempt_first and not effective(moved, "preempt"):
        dropped.append("preempt_first")
    return dropped


def preempts(profile: Profile, shape: Shape) -> list[Candidate]:
    """A group's preempt turned off where its layer preempts, on where it does not."""
    layers = compiled_layers(profile, shape)
    out = []
    for i, group in enumerate(profile.groups):
        kind = layers.get(group.name)
        if kind is None:
            continue
        current = bool(kind.options.preempt)
        if not current and kind.name is KindName.GROUPED:
            continue  # a demoted exclusive group must not preempt (presets.DEMOTED_OPTIONS)
        update: dict[str, Any] = {"preempt": not current}
        note = ""
        if current and group.preempt_first:
            update["preempt_first"] = None
            note = "; preempt_first dropped (it needs preempt)"
        if not current and group.disallow_preempt_after_us is not None:
            update["disallow_preempt_after_us"] = None
            note = "; disallow_preempt_after_us dropped (ignored on a preempting layer)"
        value = str(not current).lower()
        out.append(changed(profile, i, f"{group.name}:preempt={value}",
                           f"group {group.name!r}: preempt {str(current).lower()} -> {value}{note}",
                           **update))
    return out


def preempt_firsts(profile: Profile, shape: Shape) -> list[Candidate]:
    """preempt_first toggled for groups whose Open layer preempts (it does nothing without)."""
    layers = compiled_layers(profile, shape)
    out = []
    for i, group in enumerate(profile.groups):
        kind = layers.get(group.name)
        if kind is None or kind.name is not KindName.OPEN or not kind.options.preempt:
            continue
        current = bool(kind.options.preempt_first)
        value = str(not current).lower()
        out.append(changed(profile, i, f"{group.name}:preempt_first={value}",
                           f"group {group.name!r}: preempt_first {str(current).lower()} -> {value} "
                           "(a waking thread tries its previous CPU first)",
                           preempt_first=not current))
    return out


def _confined(profile: Profile, shape: Shape) -> Iterator[tuple[int, Group, LayerKind]]:
    """(index, group, compiled kind) of each exclusive group whose layer is Confined (the options
    below act on CPUs a layer owns; a demoted, Grouped exclusive group has its own preset)."""
    layers = compiled_layers(profile, shape)
    for i, group in enumerate(profile.groups):
        kind = layers.get(group.name)
        if group.treatment is Treatment.EXCLUSIVE and kind is not None and kind.name is KindName.CONFINED:
            yield i, group, kind


def protections(profile: Profile, shape: Shape) -> list[Candidate]:
    """protected off for an exclusive group whose Confined layer is protected."""
    return [changed(profile, i, f"{group.name}:protected=false",
                    f"group {group.name!r}: protected true -> false (its CPUs may run other "
                    "layers' threads when it leaves them idle, and preempting layers may "
                    "preempt it)", protected=False)
            for i, group, kind in _confined(profile, shape) if kind.options.protected]


def preemptible_owners(profile: Profile, shape: Shape) -> list[Candidate]:
    """An exclusive group's Confined, non-preempting layer made preemptible by waking threads of
    preempting layers at any time: protected off, disallow_preempt_after_us "never" (MAX_US)."""
    return [changed(profile, i, f"{group.name}:preemptible",
                    f"group {group.name!r}: protected false, disallow_preempt_after_us never "
                    "(a preempting layer's waking thread may take its CPU however long the "
                    "CPU has been busy; scx_layered stops that after 80 ms by default)",
                    protected=False, disallow_preempt_after_us=MAX_US)
            for i, group, kind in _confined(profile, shape)
            if not kind.options.preempt and group.disallow_preempt_after_us != MAX_US]


def sharings(profile: Profile, shape: Shape) -> list[Candidate]:
    """`exclusive` off for an exclusive group's Confined layer: its CPUs' SMT siblings may run
    other layers (measured on rolesim at bg=0 with `protected` off too: hot 0.95x of the
    default's, against 0.89x with `exclusive` kept; benchmarks/data/rolesim-hot-variants.duckdb)."""
    return [changed(profile, i, f"{group.name}:exclusive=false",
                    f"group {group.name!r}: exclusive true -> false (the SMT siblings of its "
                    "CPUs may run other layers' threads)", exclusive=False)
            for i, group, kind in _confined(profile, shape) if kind.options.exclusive]


def exclusive_slices(profile: Profile, shape: Shape) -> list[Candidate]:
    """slice_us 1000 and 2000 for an exclusive group (values slices() does not already offer)."""
    layers = compiled_layers(profile, shape)
    out = []
    for i, group in enumerate(profile.groups):
        kind = layers.get(group.name)
        if (group.treatment is not Treatment.EXCLUSIVE or kind is None
                or kind.name not in (KindName.CONFINED, KindName.GROUPED)):
            continue
        current = kind.options.slice_us or 0
        for value in EXCLUSIVE_SLICES_US:
            if value in (current, current // 2, current * 2):
                continue
            out.append(changed(profile, i, f"{group.name}:slice_us={value}",
                               f"group {group.name!r}: slice_us {current} -> {value} (how long its "
                               "task keeps a CPU another layer's waking thread wants)",
                               slice_us=value))
    return out


def _catch_all(profile: Profile, name: str, description: str, **update: Any) -> Candidate:
    catch_all = (profile.catch_all or CatchAll()).model_copy(update=update)
    return Candidate(name, description, profile.model_copy(update={"catch_all": catch_all}))


def catch_all_options(profile: Profile, shape: Shape) -> list[Candidate]:
    """The catch-all's slice_us halved and 2000 us, and its preempt toggled."""
    kind = compiled_layers(profile, shape).get(CATCH_ALL)
    if kind is None:
        return []
    current = kind.options.slice_us or 0
    out = []
    for value in dict.fromkeys((current // 2, CATCH_ALL_SHORT_SLICE_US)):
        if 1 <= value != current:
            out.append(_catch_all(profile, f"{CATCH_ALL}:slice_us={value}",
                                  f"catch-all: slice_us {current} -> {value} (how long a thread no "
                                  "group takes keeps a CPU a waking thread wants)", slice_us=value))
    preempt = bool(kind.options.preempt)
    value = str(not preempt).lower()
    out.append(_catch_all(profile, f"{CATCH_ALL}:preempt={value}",
                          f"catch-all: preempt {str(preempt).lower()} -> {value}", preempt=not preempt))
    return out


# scx_layered's userspace step: 1 s (follows load 5x faster than the preset) and 10 s (half the
# preset's steps); both inside the schema's range.
INTERVAL_CHOICES_MS = (1000, 10_000)


def scheduler_intervals(profile: Profile, _shape: Shape) -> list[Candidate]:
    """scx_layered's --interval (the [scheduler] table) at the other INTERVAL_CHOICES_MS."""
    table = profile.scheduler or Scheduler()
    current = scheduler_interval_ms(profile)
    out = []
    for value in INTERVAL_CHOICES_MS:
        if value != current:
            scheduler = table.model_copy(update={"interval_ms": value})
            out.append(Candidate(f"scheduler:interval_ms={value}",
                                 f"scx_layered's userspace step every {current} -> {value} ms (each "
                                 "step runs ahead of every layer; a layer sized by load follows it "
                                 "at this pace)", profile.model_copy(update={"scheduler": scheduler})))
    return out
