"""A semantic diff of two profiles, for review in pull requests.

Problem: a line diff of two profile TOMLs shows moved comments and evidence
numbers; a reviewer wants to know what changes for the scheduler: which groups
came or went, which treatment or size changed, which threads now land in
another layer (or leave the profile altogether), and what the compiled layers
look like on a machine.

Approach: both files are read and validated (`rules.load_valid`; files of
different schema versions are refused before anything is compared). Groups
pair up by name, then (a renamed group) by identical patterns. For each pair
the scheduling fields are compared (treatment, patterns, sizing, family, and
every option override: slice_us, weight, preempt, ...), and the `[workload]`,
`[catch_all]` and `[scheduler]` tables; an option a profile leaves to its
preset is shown with the preset's value, marked `(preset)`. The order of the
paired groups is compared too (first match wins, so order is behaviour).
Threads are placed in both profiles (diff_threads.py): in or out of the
workload (`[workload]` process and cgroup), then the first group whose
patterns match. A thread whose layer changes is a move; one whose layer keeps
its name but not its settings is listed too. With a shape, both profiles are
compiled and their layers compared by name (kind, CPUs, options, the catch-all
`rest` included), a group that compile demotes (or no longer demotes) from
exclusive is one change with compile's reason, and scx_layered's command-line
flags (`scx_layered`, from `[scheduler]` over its preset) are compared too.
diff_render.py prints the same `Diff` as text or Markdown.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.errors import InputError
from threadwise.shape import Shape
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.compile import Compiled, LayerPlan, compile_profile
from threadwise.synthesize.diff_threads import Move, Retreat, Thread, place_threads
from threadwise.synthesize.layered import LayerSpec
from threadwise.synthesize.presets import (
    CATCH_ALL_OPTIONS,
    SCHEDULER_INTERVAL_MS,
    effective,
    preset_value,
    scheduler_args,
    scx_default,
)
from threadwise.synthesize.reader import read_text
from threadwise.synthesize.rules import CATCH_ALL, load_valid
from threadwise.synthesize.schema import OPTION_KEYS, CatchAll, Group, Profile, Scheduler
from threadwise.words import Lit, Words, lits

SIZING = ("hot_threads", "cpu_fraction", "request_millicores")
# A group's fields that change how its threads are scheduled (patterns decide which threads it
# takes; `family` and the comments only explain).
SETTINGS = ("treatment", *SIZING, *OPTION_KEYS)
SCHEDULER = "scheduler"         # where a [scheduler] change is reported
SCX_FLAGS = "scx_layered"       # where, with a shape, a change of scx_layered's flags is reported
REST_LABEL = f"{CATCH_ALL} (catch-all)"
# Compiled layer options compared with --shape (the group's own override keys are compared always).
LAYER_OPTIONS = ("cpus_range", "exclusive", "protected", "preempt", "preempt_first", "slice_us",
                 "min_exec_us", "weight", "disallow_preempt_after_us", "util_range")


@dataclass(frozen=True)
class Change:
    """One field of one group (or of the workload, a table, a compiled layer) that differs."""

    where: str
    field: str
    old: Words
    new: Words


@dataclass
class Diff:
    old_file: str
    new_file: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    old_order: list[str] = field(default_factory=list)
    new_order: list[str] = field(default_factory=list)
    reordered: bool = False
    changes: list[Change] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    retreated: list[Retreat] = field(default_factory=list)   # same layer, other settings
    threads_from: Words = ("evidence",)
    threads_checked: int = 0
    shape: str | None = None
    layer_changes: list[Change] = field(default_factory=list)
    layers_added: list[str] = field(default_factory=list)
    layers_removed: list[str] = field(default_factory=list)
    evidence: list[Words] = field(default_factory=list)      # what the training records say (cli)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.reordered or self.changes
                    or self.moves or self.retreated or self.layer_changes or self.layers_added
                    or self.layers_removed)


def _version(path: Path) -> tuple[object, int]:
    text = read_text(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None, 1     # load_valid reports the syntax error with its line
    return raw.get("schema_version"), SourceMap(text).line_of(("schema_version",)) or 1


def _lit(value: object) -> str:
    """A value as the profile writes it (TOML's lowercase booleans)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def show(value: object) -> Words:
    """A field's value as literals; `-` when it is not set."""
    if value is None:
        return ("-",)
    if isinstance(value, tuple):   # a compiled range, e.g. cpus_range
        return (Lit(f"[{', '.join(_lit(v) for v in value)}]"),)
    if isinstance(value, list):
        return lits(_lit(v) for v in value)
    return (Lit(_lit(getattr(value, "value", value))),)


def _option(value: object, fallback: object, whose: str) -> Words:
    """An option override, or (not set) the value it falls back to and whose value that is."""
    return show(value) if value is not None else (Lit(_lit(fallback)), f" ({whose})")


def _pair(old: Profile, new: Profile) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """old group name -> new group name, and the renames among them."""
    new_names = {g.name for g in new.groups}
    pairs = {g.name: g.name for g in old.groups if g.name in new_names}
    renamed = []
    for g in old.groups:
        if g.name in pairs:
            continue
        twin = next((n for n in new.groups if n.name not in pairs.values() and n.match == g.match
                     and n.title == g.title and n.exclude == g.exclude), None)
        if twin is not None:
            pairs[g.name] = twin.name
            renamed.append((g.name, twin.name))
    return pairs, renamed


def _group_changes(label: str, a: Group, b: Group) -> list[Change]:
    out = []
    for name in ("treatment", "match", "title", "exclude", "avg_runtime_us", "uid", "family", *SIZING):
        va, vb = getattr(a, name), getattr(b, name)
        if va != vb:
            out.append(Change(label, name, show(va), show(vb)))
    for key in OPTION_KEYS:   # unset: the value the group's treatment preset gives it
        va, vb = getattr(a, key), getattr(b, key)
        if va != vb:
            out.append(Change(label, key, _option(va, effective(a, key), "preset"),
                              _option(vb, effective(b, key), "preset")))
    if a.treatment.value == b.treatment.value == "exclusive" and a.exclusive_cores() != b.exclusive_cores():
        out.append(Change(label, "exclusive cores", show(a.exclusive_cores()), show(b.exclusive_cores())))
    return out


def _table_changes(old: Profile, new: Profile) -> list[Change]:
    """Changes of [workload], [catch_all] and [scheduler] (unset options: their preset's value)."""
    out = [Change("workload", name, show(getattr(old.workload, name)), show(getattr(new.workload, name)))
           for name in type(old.workload).model_fields
           if getattr(old.workload, name) != getattr(new.workload, name)]
    a_rest, b_rest = old.catch_all or CatchAll(), new.catch_all or CatchAll()
    for name in CatchAll.model_fields:
        va, vb = getattr(a_rest, name), getattr(b_rest, name)
        if va != vb:
            preset = preset_value(CATCH_ALL_OPTIONS, name)
            out.append(Change(REST_LABEL, name, _option(va, preset, "preset"), _option(vb, preset, "preset")))
    a_step, b_step = old.scheduler or Scheduler(), new.scheduler or Scheduler()
    for name in Scheduler.model_fields:
        va, vb = getattr(a_step, name), getattr(b_step, name)
        if va != vb:
            out.append(Change(SCHEDULER, name, _option(va, SCHEDULER_INTERVAL_MS, "preset"),
                              _option(vb, SCHEDULER_INTERVAL_MS, "preset")))
    return out


def _compare_groups(old: Profile, new: Profile, diff: Diff) -> dict[str, str]:
    """Groups added, removed, renamed, reordered and changed; returns the old -> new name pairs."""
    pairs, diff.renamed = _pair(old, new)
    diff.removed = [g.name for g in old.groups if g.name not in pairs]
    diff.added = [g.name for g in new.groups if g.name not in pairs.values()]
    new_by = {g.name: g for g in new.groups}
    for g in old.groups:
        if g.name in pairs:
            label = g.name if pairs[g.name] == g.name else f"{g.name} -> {pairs[g.name]}"
            diff.changes += _group_changes(label, g, new_by[pairs[g.name]])
    diff.old_order = [pairs[g.name] for g in old.groups if g.name in pairs]
    diff.new_order = [g.name for g in new.groups if g.name in pairs.values()]
    diff.reordered = diff.old_order != diff.new_order
    return pairs


def scheduling_changes(old: Profile, new: Profile) -> list[str]:
    """What differs between two profiles for the scheduler, one short phrase each (empty: the two
    schedule every thread alike; names, comments, evidence and `family` do not count)."""
    diff = Diff("old", "new")
    _compare_groups(old, new, diff)
    diff.changes += _table_changes(old, new)
    out = [f"group {name} added" for name in diff.added] + [f"group {name} removed" for name in diff.removed]
    out += [f"group {a} renamed {b}" for a, b in diff.renamed]
    out += ["groups reordered"] if diff.reordered else []
    out += [f"{c.where}: {c.field}" for c in diff.changes if c.field not in ("family", "exclusive cores")]
    return out


# --- compiled layers (with a shape) ---------------------------------------------------------------


def _layer_value(key: str, value: object) -> Words:
    """A compiled option; unset: scx_layered's own default, where it has one."""
    if value is not None:
        return show(value)
    try:
        return _option(None, scx_default(key), "scx_layered's default")
    except KeyError:
        return ("-",)


def _option_changes(name: str, la: LayerSpec, lb: LayerSpec) -> list[Change]:
    out = []
    if la.kind.name != lb.kind.name:
        out.append(Change(name, "kind", show(la.kind.name.value), show(lb.kind.name.value)))
    oa, ob = la.kind.options, lb.kind.options
    for option in LAYER_OPTIONS:
        va, vb = getattr(oa, option, None), getattr(ob, option, None)
        if va != vb:
            out.append(Change(name, option, _layer_value(option, va), _layer_value(option, vb)))
    return out


def _kind_words(plan: LayerPlan, shape: Shape) -> Words:
    if plan.demoted:
        return (Lit("Grouped"), " (shares CPUs, sized by use): ", plan.reason)
    cpus = plan.cores * shape.threads_per_core
    return (Lit("Confined"), f" exclusive, {plan.cores} whole core{'s' * (plan.cores != 1)} "
            f"({cpus} CPU{'s' * (cpus != 1)})")


def _demotion(name: str, pa: LayerPlan, pb: LayerPlan, folded: list[Change], shape: Shape) -> Change:
    """A demotion (or its end) as one change: the kind before and after, compile's reason, and the
    option changes that come with it (the demoted preset replaces the exclusive one)."""
    new = list(_kind_words(pb, shape))
    if folded:
        new.append("; with it ")
        for i, change in enumerate(folded):
            new += [", " * (i > 0), Lit(change.field), " ", *change.old, " -> ", *change.new]
    return Change(name, "demoted" if pb.demoted else "no longer demoted", _kind_words(pa, shape), tuple(new))


def _plans(compiled: Compiled) -> dict[str, LayerPlan]:
    return {plan.group: plan for plan in compiled.plans}


def _layers(old: Profile, new: Profile, shape: Shape, diff: Diff) -> None:
    ca, cb = compile_profile(old, shape), compile_profile(new, shape)
    a = {s.name: s for s in ca.config.specs}
    b = {s.name: s for s in cb.config.specs}
    plans_a, plans_b = _plans(ca), _plans(cb)
    diff.layers_added = [n for n in b if n not in a]
    diff.layers_removed = [n for n in a if n not in b]
    for name in (n for n in b if n in a):
        changes = _option_changes(name, a[name], b[name])
        pa, pb = plans_a.get(name), plans_b.get(name)
        if pa is not None and pb is not None and pa.demoted != pb.demoted:
            changes = [_demotion(name, pa, pb, [c for c in changes if c.field != "kind"], shape)]
        diff.layer_changes += changes
        if a[name].matches != b[name].matches:
            diff.layer_changes.append(Change(name, "matches", (f"{len(a[name].matches)} blocks",),
                                             (f"{len(b[name].matches)} blocks (changed)",)))
    flags_a, flags_b = scheduler_args(old), scheduler_args(new)
    if flags_a != flags_b:
        diff.layer_changes.append(Change(SCX_FLAGS, "flags", (Lit(" ".join(flags_a)),),
                                         (Lit(" ".join(flags_b)),)))


def _settings(diff: Diff) -> dict[str, list[str]]:
    """New layer name -> the names of the fields that change how its threads are scheduled."""
    out: dict[str, list[str]] = {}
    for change in diff.changes:
        if change.where == REST_LABEL:
            out.setdefault(CATCH_ALL, []).append(change.field)
        elif change.field in SETTINGS and change.where not in ("workload", SCHEDULER):
            out.setdefault(change.where.rsplit(" -> ", 1)[-1], []).append(change.field)
    for change in diff.layer_changes:
        fields = out.get(change.where, [])
        if change.where != SCX_FLAGS and change.field not in ("matches", *fields):
            out[change.where] = [*fields, change.field]
    return out


def diff_profiles(old_path: str | Path, new_path: str | Path, *, shape: Shape | None = None,
                  capture: str | Path | None = None) -> Diff:
    """The semantic diff of two profile files (see the module note)."""
    old_path, new_path = Path(old_path), Path(new_path)
    (va, la), (vb, lb) = _version(old_path), _version(new_path)
    if va is not None and vb is not None and va != vb:
        raise InputError(f"{old_path}:{la}: schema_version {va!r}, but {new_path}:{lb}: "
                         f"schema_version {vb!r}: diff compares profiles of one schema",
                         hint="migrate the older profile (re-run threadwise synthesize) and diff again")
    old, new = load_valid(old_path), load_valid(new_path)
    diff = Diff(str(old_path), str(new_path))
    diff.changes += _table_changes(old, new)
    pairs = _compare_groups(old, new, diff)
    if shape is not None:
        diff.shape = shape.describe()
        _layers(old, new, shape, diff)
    threads = None if capture is None else Thread.from_capture(Path(capture))
    placed = place_threads(old, new, pairs, _settings(diff), threads)
    diff.moves = placed.moves
    diff.retreated, diff.threads_checked = placed.retreated, placed.checked
    diff.threads_from = placed.source if capture is None else ("capture ", Lit(str(capture)))
    return diff
