"""`threadwise diff` printed: plain text (terminal, CI logs) or Markdown (a pull-request comment).

Both print the same `Diff` in the same order: group summary, field changes,
threads that change layer (leaving or joining the profile included), threads
whose layer keeps its name but changes settings, the compiled layers (with a
shape), and what the training records say about each profile. In Markdown
every pattern, name and value is a code span (words.py), so `io_thd_*` reads
as written in any CommonMark renderer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from threadwise.synthesize.diff import REST_LABEL, SCHEDULER, SCX_FLAGS, Change, Diff
from threadwise.synthesize.diff_threads import Move, Retreat
from threadwise.synthesize.provenance import RecordNote
from threadwise.words import Lit, Words, lits, markdown, plain

Render = Callable[[Iterable[str]], str]


def evidence_lines(notes: Iterable[tuple[Path, RecordNote | None]]) -> list[Words]:
    """One line per profile whose header names a training record: what the record says of it."""
    return [(f"{which} ", Lit(str(path)), ": ", *note.sentence)
            for which, (path, note) in zip(("old", "new"), notes, strict=True) if note is not None]


def _where(where: str) -> Words:
    if where == REST_LABEL:
        return (Lit("rest"), " (catch-all)")
    if where in ("workload", SCHEDULER):
        return (Lit(f"[{where}]"),)
    if where == SCX_FLAGS:
        return (SCX_FLAGS,)
    old, arrow, new = where.partition(" -> ")   # a renamed group
    return (Lit(old), " -> ", Lit(new)) if arrow else (Lit(where),)


def _field(name: str) -> Words:
    """A profile or layer key as a literal; the diff's own words (e.g. `demoted`) as prose."""
    return (Lit(name),) if re.fullmatch(r"[a-z_]+", name) and name not in ("demoted", "matches") else (name,)


def _summary(d: Diff) -> list[Words]:
    lines: list[Words] = []
    if d.added:
        lines.append(("groups added: ", *lits(d.added)))
    if d.removed:
        lines.append(("groups removed: ", *lits(d.removed)))
    lines += [("group renamed: ", Lit(a), " -> ", Lit(b), " (same patterns)") for a, b in d.renamed]
    if d.reordered:
        lines.append(("groups reordered (first match wins): ", *lits(d.old_order, " > "), "  ->  ",
                      *lits(d.new_order, " > ")))
    return lines


def _thread(m: Move) -> Words:
    return (Lit(m.thread),) + ((" in ", Lit(m.process)) if m.process else ())


def _moves_title(d: Diff) -> Words:
    leave = sum(1 for m in d.moves if plain(m.new).startswith("not in the profile"))
    join = sum(1 for m in d.moves if plain(m.old).startswith("not in the profile"))
    counts = f"; {leave} leave the profile" if leave else ""
    counts += f"; {join} join the profile" if join else ""
    return (f"threads that change layer ({len(d.moves)} of {d.threads_checked}, from ", *d.threads_from,
            f"{counts})")


def _retreat_title(d: Diff) -> Words:
    count = sum(len(r.threads) for r in d.retreated)
    return (f"threads that keep their layer while its settings change ({count} of {d.threads_checked})",)


def _retreat(r: Retreat) -> tuple[Words, Words, Words]:
    fields = tuple(w for i, f in enumerate(r.fields) for w in ((", ",) * (i > 0) + _field(f)))
    return r.layer, fields, lits(r.threads)


def _change(c: Change) -> tuple[Words, Words, Words, Words]:
    return _where(c.where), _field(c.field), c.old, c.new


def _text_change(c: Change) -> str:
    where, name, old, new = _change(c)
    return f"  {plain(where)}: {plain(name)}: {plain(old)} -> {plain(new)}"


def render_text(d: Diff) -> str:
    """The diff as plain text (terminal, CI logs)."""
    out = [f"threadwise diff {d.old_file} -> {d.new_file}"]
    if d.empty:
        out.append("no scheduling changes")
        return "\n".join(out + [f"  {plain(line)}" for line in d.evidence]) + "\n"
    out += [plain(line) for line in _summary(d)]
    if d.changes:
        out.append("changes:")
        out += [_text_change(c) for c in d.changes]
    out.append(plain(_moves_title(d)) + ":")
    out += [f"  {plain(_thread(m))}: {plain(m.old)} -> {plain(m.new)}" for m in d.moves] or ["  (none)"]
    if d.retreated:
        out.append(plain(_retreat_title(d)) + ":")
        out += [f"  {plain(layer)}: {plain(fields)}: {plain(threads)}"
                for layer, fields, threads in map(_retreat, d.retreated)]
    if d.shape is not None:
        out.append(f"compiled layers on {d.shape}:")
        out += [f"  layer added: {n}" for n in d.layers_added]
        out += [f"  layer removed: {n}" for n in d.layers_removed]
        out += [_text_change(c) for c in d.layer_changes]
        if not (d.layers_added or d.layers_removed or d.layer_changes):
            out.append("  (no change)")
    if d.evidence:
        out += ["evidence:", *(f"  {plain(line)}" for line in d.evidence)]
    return "\n".join(out) + "\n"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _row(*cells: Words) -> str:
    return "| " + " | ".join(markdown(cell) for cell in cells) + " |"


def _table(head: tuple[str, ...], rows: list[str]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows]


def render_markdown(d: Diff) -> str:
    """The diff as a pull-request comment (GitHub-flavoured Markdown; literals in code spans)."""
    out = [f"### threadwise diff: {markdown((Lit(d.old_file),))} -> {markdown((Lit(d.new_file),))}", ""]
    evidence = [f"- {markdown(line)}" for line in d.evidence]
    evidence = ["", "**Evidence** (the training records):", "", *evidence] if evidence else []
    if d.empty:
        return "\n".join([*out, "No scheduling changes.", *evidence]) + "\n"
    summary = _summary(d)
    if summary:
        out += [f"- {markdown(line)}" for line in summary] + [""]
    if d.changes:
        out += [*_table(("group", "field", "old", "new"), [_row(*_change(c)) for c in d.changes]), ""]
    out += [f"**{_capital(markdown(_moves_title(d)))}:**", ""]
    moves = [_row(_thread(m), m.old, m.new) for m in d.moves]
    out += _table(("thread", "old layer", "new layer"), moves) if moves else ["none"]
    if d.retreated:
        out += ["", f"**{_capital(markdown(_retreat_title(d)))}:**", ""]
        out += _table(("layer", "settings that change", "threads"), [_row(*_retreat(r)) for r in d.retreated])
    if d.shape is not None:
        out += ["", f"**Compiled layers** on {markdown((d.shape,))}:", ""]
        rows = ([_row((Lit(n),), ("added",), (), ()) for n in d.layers_added]
                + [_row((Lit(n),), ("removed",), (), ()) for n in d.layers_removed]
                + [_row(*_change(c)) for c in d.layer_changes])
        out += _table(("layer", "field", "old", "new"), rows) if rows else ["no change"]
    return "\n".join([*out, *evidence]) + "\n"
