"""A semantic diff of two profiles, for review in pull requests.

Problem: a line diff of two profile TOMLs shows moved comments and evidence
numbers; a reviewer wants to know what changes for the scheduler: which groups
came or went, which treatment or size changed, which threads now land in
another layer, and what the compiled layers look like on a machine.

Approach: both files are read and validated (`rules.load_valid`; files of
different schema versions are refused before anything is compared). Groups
pair up by name, then (a renamed group) by identical patterns. For each pair
the scheduling fields are compared (treatment, patterns, sizing, family, and
every option override: slice_us, weight, preempt, ...), and the `[catch_all]`
and `[scheduler]` overrides; the order of the paired groups is compared too
(first match wins, so order is behaviour). Threads are placed with the
profiles' own first-match rule (`overlap.group_matches`) in both profiles: the
names come from both profiles' evidence, or from a capture's target threads.
With a shape, both profiles are compiled and their layers compared by name
(kind, CPUs, options, the catch-all `rest` included), and scx_layered's
command-line flags (`scx_layered`, from `[scheduler]` over its preset) too.
`render_text` and `render_markdown` print the same `Diff`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.errors import InputError
from threadwise.shape import Shape
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.locate import SourceMap
from threadwise.synthesize.overlap import group_matches
from threadwise.synthesize.presets import scheduler_args
from threadwise.synthesize.reader import read_text
from threadwise.synthesize.rules import CATCH_ALL, load_valid
from threadwise.synthesize.schema import OPTION_KEYS, CatchAll, Group, Profile, Scheduler

SIZING = ("hot_threads", "cpu_fraction", "request_millicores")
SCHEDULER = "scheduler"         # where a [scheduler] change is reported
SCX_FLAGS = "scx_layered"       # where, with a shape, a change of scx_layered's flags is reported
# Compiled layer options compared with --shape (the group's own override keys are compared always).
LAYER_OPTIONS = ("cpus_range", "exclusive", "protected", "preempt", "preempt_first", "slice_us",
                 "min_exec_us", "weight", "disallow_preempt_after_us", "util_range")


@dataclass(frozen=True)
class Change:
    """One field of one group (or of the workload / a layer) that differs."""

    where: str
    field: str
    old: str
    new: str


@dataclass(frozen=True)
class Move:
    """An observed thread that lands in another layer."""

    thread: str
    old: str
    new: str


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
    threads_from: str = "evidence"
    threads_checked: int = 0
    shape: str | None = None
    layer_changes: list[Change] = field(default_factory=list)
    layers_added: list[str] = field(default_factory=list)
    layers_removed: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.reordered or self.changes
                    or self.moves or self.layer_changes or self.layers_added or self.layers_removed)


def _version(path: Path) -> tuple[object, int]:
    text = read_text(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None, 1     # load_valid reports the syntax error with its line
    return raw.get("schema_version"), SourceMap(text).line_of(("schema_version",)) or 1


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def _pair(old: Profile, new: Profile) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """old group name -> new group name, and the renames among them."""
    new_names = {g.name for g in new.groups}
    pairs = {g.name: g.name for g in old.groups if g.name in new_names}
    renamed = []
    for g in old.groups:
        if g.name in pairs:
            continue
        twin = next((n for n in new.groups if n.name not in pairs.values() and n.match == g.match
                     and n.exclude == g.exclude), None)
        if twin is not None:
            pairs[g.name] = twin.name
            renamed.append((g.name, twin.name))
    return pairs, renamed


def _group_changes(label: str, a: Group, b: Group) -> list[Change]:
    out = []
    for name in ("treatment", "match", "exclude", "avg_runtime_us", "family", *SIZING, *OPTION_KEYS):
        va, vb = getattr(a, name), getattr(b, name)
        if va != vb:
            out.append(Change(label, name, _show(getattr(va, "value", va)), _show(getattr(vb, "value", vb))))
    if a.treatment.value == b.treatment.value == "exclusive" and a.exclusive_cores() != b.exclusive_cores():
        out.append(Change(label, "exclusive cores", str(a.exclusive_cores()), str(b.exclusive_cores())))
    return out


def layer_of(profile: Profile, comm: str) -> Group | None:
    """The group a thread named `comm` of the workload lands in (first match wins; None: the
    compiled catch-all `rest`)."""
    return next((g for g in profile.groups if group_matches(g, comm)), None)


def _label(group: Group | None) -> str:
    return f"{CATCH_ALL} (catch-all)" if group is None else f"{group.name} ({group.treatment.value})"


def _names(old: Profile, new: Profile) -> list[str]:
    return sorted({n for p in (old, new) for g in p.groups for n in (g.evidence.names if g.evidence else [])})


def _capture_names(capture: Path) -> list[str]:
    # deferred: loads polars, duckdb and sklearn (analysis), which this module's other callers do without
    from threadwise.analyze import capture_threads

    threads = capture_threads(capture).threads
    return sorted({n for n in threads["name"].drop_nulls().to_list()})


def _layers(old: Profile, new: Profile, shape: Shape, diff: Diff) -> None:
    a = {s.name: s for s in compile_profile(old, shape).config.specs}
    b = {s.name: s for s in compile_profile(new, shape).config.specs}
    diff.layers_added = [n for n in b if n not in a]
    diff.layers_removed = [n for n in a if n not in b]
    for name in (n for n in b if n in a):
        la, lb = a[name], b[name]
        if la.kind.name != lb.kind.name:
            diff.layer_changes.append(Change(name, "kind", str(la.kind.name.value), str(lb.kind.name.value)))
        oa, ob = la.kind.options, lb.kind.options
        for option in LAYER_OPTIONS:
            va, vb = getattr(oa, option, None), getattr(ob, option, None)
            if va != vb:
                diff.layer_changes.append(Change(name, option, _show(va), _show(vb)))
        if la.matches != lb.matches:
            diff.layer_changes.append(Change(name, "matches", f"{len(la.matches)} blocks",
                                             f"{len(lb.matches)} blocks (changed)"))
    flags_a, flags_b = scheduler_args(old), scheduler_args(new)
    if flags_a != flags_b:
        diff.layer_changes.append(Change(SCX_FLAGS, "flags", " ".join(flags_a), " ".join(flags_b)))


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
    if old.workload != new.workload:
        for name in type(old.workload).model_fields:
            va2, vb2 = getattr(old.workload, name), getattr(new.workload, name)
            if va2 != vb2:
                diff.changes.append(Change("workload", name, _show(va2), _show(vb2)))
    a_rest, b_rest = old.catch_all or CatchAll(), new.catch_all or CatchAll()
    for name in CatchAll.model_fields:
        va3, vb3 = getattr(a_rest, name), getattr(b_rest, name)
        if va3 != vb3:
            diff.changes.append(Change(f"{CATCH_ALL} (catch-all)", name, _show(va3), _show(vb3)))
    a_step, b_step = old.scheduler or Scheduler(), new.scheduler or Scheduler()
    for name in Scheduler.model_fields:
        va4, vb4 = getattr(a_step, name), getattr(b_step, name)
        if va4 != vb4:
            diff.changes.append(Change(SCHEDULER, name, _show(va4), _show(vb4)))
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
    if capture is not None:
        names, diff.threads_from = _capture_names(Path(capture)), f"capture {capture}"
    else:
        names = _names(old, new)
    diff.threads_checked = len(names)
    for name in names:
        a, b = layer_of(old, name), layer_of(new, name)
        a_name, b_name = (a.name if a else CATCH_ALL), (b.name if b else CATCH_ALL)
        if pairs.get(a_name, a_name) != b_name:
            diff.moves.append(Move(name, _label(a), _label(b)))
    if shape is not None:
        diff.shape = shape.describe()
        _layers(old, new, shape, diff)
    return diff


def _summary(d: Diff) -> list[str]:
    lines = []
    if d.added:
        lines.append(f"groups added: {', '.join(d.added)}")
    if d.removed:
        lines.append(f"groups removed: {', '.join(d.removed)}")
    for a, b in d.renamed:
        lines.append(f"group renamed: {a} -> {b} (same patterns)")
    if d.reordered:
        lines.append(f"groups reordered (first match wins): {' > '.join(d.old_order)}  ->  "
                     f"{' > '.join(d.new_order)}")
    return lines


def render_text(d: Diff) -> str:
    """The diff as plain text (terminal, CI logs)."""
    out = [f"threadwise diff {d.old_file} -> {d.new_file}"]
    if d.empty:
        return "\n".join([*out, "no scheduling changes"]) + "\n"
    out += _summary(d)
    if d.changes:
        out.append("changes:")
        out += [f"  {c.where}: {c.field}: {c.old} -> {c.new}" for c in d.changes]
    out.append(f"threads that change layer ({len(d.moves)} of {d.threads_checked}, from {d.threads_from}):")
    out += [f"  {m.thread}: {m.old} -> {m.new}" for m in d.moves] or ["  (none)"]
    if d.shape is not None:
        out.append(f"compiled layers on {d.shape}:")
        out += [f"  layer added: {n}" for n in d.layers_added]
        out += [f"  layer removed: {n}" for n in d.layers_removed]
        out += [f"  {c.where}: {c.field}: {c.old} -> {c.new}" for c in d.layer_changes]
        if not (d.layers_added or d.layers_removed or d.layer_changes):
            out.append("  (no change)")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(d: Diff) -> str:
    """The diff as a pull-request comment (GitHub-flavoured markdown)."""
    out = [f"### threadwise diff: `{d.old_file}` -> `{d.new_file}`", ""]
    if d.empty:
        return "\n".join([*out, "No scheduling changes."]) + "\n"
    summary = _summary(d)
    if summary:
        out += [f"- {line}" for line in summary] + [""]
    if d.changes:
        out += ["| group | field | old | new |", "|---|---|---|---|"]
        out += [f"| {_cell(c.where)} | {c.field} | {_cell(c.old)} | {_cell(c.new)} |" for c in d.changes]
        out.append("")
    out.append(f"**Threads that change layer** ({len(d.moves)} of {d.threads_checked}, "
               f"from {d.threads_from}):")
    out.append("")
    if d.moves:
        out += ["| thread | old layer | new layer |", "|---|---|---|"]
        out += [f"| `{_cell(m.thread)}` | {m.old} | {m.new} |" for m in d.moves]
    else:
        out.append("none")
    if d.shape is not None:
        out += ["", f"**Compiled layers** on {d.shape}:", ""]
        rows = ([f"| {n} | added | | |" for n in d.layers_added]
                + [f"| {n} | removed | | |" for n in d.layers_removed]
                + [f"| {_cell(c.where)} | {c.field} | {_cell(c.old)} | {_cell(c.new)} |"
                   for c in d.layer_changes])
        out += ["| layer | field | old | new |", "|---|---|---|---|", *rows] if rows else ["no change"]
    return "\n".join(out) + "\n"
