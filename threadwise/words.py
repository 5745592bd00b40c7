"""Sentences that keep their literals apart, for plain text and for Markdown.

Problem: review output names patterns (`io_thd_*`), thread names and values
inside prose. Printed as plain text they read fine; pasted into a pull-request
comment, CommonMark takes `_` and `*` for emphasis and `io_thd_*, redis-*`
comes out as `io_thd_<em>, redis-</em>`: the pattern under review is lost.

Approach: a sentence is a tuple of pieces; a piece that is a literal is a
`Lit` (a str subclass). `plain` joins the pieces as they are; `markdown` puts
each literal in a code span (a fence longer than any backtick run inside it,
so any text survives) and escapes the prose's Markdown characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

Words = tuple[str, ...]
# Characters of prose that CommonMark or a GFM table would read as syntax (`_` inside a word,
# as in scx_layered, never opens emphasis: left as it is, so the raw comment stays readable).
_PROSE_SPECIAL = re.compile(r"([\\`*\[\]<|]|(?<!\w)_|_(?!\w))")


class Lit(str):
    """A literal inside a sentence: a pattern, a name, a value (a code span in Markdown)."""

    __slots__ = ()


def lits(values: Iterable[object], sep: str = ", ", empty: str = "-") -> Words:
    """Each value a literal, joined by `sep` in prose; `empty` (prose) when there is none."""
    out: list[str] = []
    for value in values:
        if out:
            out.append(sep)
        out.append(Lit(value))
    return tuple(out) or (empty,)


def plain(words: Iterable[str]) -> str:
    return "".join(words)


def code_span(text: str) -> str:
    """`text` as a CommonMark code span that renders exactly `text`, also in a GFM table cell."""
    text = text.replace("\n", " ").replace("|", "\\|")   # a table row is one line; `\|` keeps a pipe
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown(words: Iterable[str]) -> str:
    """The sentence as Markdown: literals in code spans, prose escaped (safe in a table cell)."""
    return "".join(code_span(w) if isinstance(w, Lit) else _PROSE_SPECIAL.sub(r"\\\1", w.replace("\n", " "))
                   for w in words)
