"""SQL modules: the stages' queries live in `.sql` files, never in Python strings.

A `.sql` file holds one statement, or several, each introduced by a line
`-- name: NAME` and followed by its header: what it returns, each column with
its type and meaning, and its parameters (bound by name or position, never
pasted into the text). Text before the first `-- name:` line is the file's own
header. Perfetto's stdlib is the model (DESIGN.md: "SQL as modules").

Where an identifier cannot be a bound parameter (a table name in `INSERT INTO
{table}`), `identifier` admits only names from a whitelist the caller states,
and quotes them; anything else is a programming error (ValueError). Values are
always bound (`placeholders(n)` writes the markers).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import cache
from importlib import resources

_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$")
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


@cache
def statements(package: str, filename: str) -> dict[str, str]:
    """The named statements of `package`'s `filename` (a file without names: {stem: text})."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        marker = _NAME.match(line)
        if marker:
            if marker.group(1) in found:
                raise ValueError(f"{package}/{filename}: statement {marker.group(1)!r} defined twice")
            current = found[marker.group(1)] = []
        elif current is not None:
            current.append(line)
    if not found:
        return {filename.rsplit("/", 1)[-1].removesuffix(".sql"): text}
    return {name: "\n".join(lines).strip() + "\n" for name, lines in found.items()}


def statement(package: str, filename: str, name: str) -> str:
    """One named statement of an SQL module (KeyError names what the file has)."""
    found = statements(package, filename)
    if name not in found:
        raise KeyError(f"{package}/{filename} has no statement {name!r} (it has {sorted(found)})")
    return found[name]


def placeholders(count: int) -> str:
    """`?, ?, ?`: positional parameter markers for `count` bound values."""
    return ", ".join("?" * count)


def identifier(name: str, allowed: Collection[str]) -> str:
    """`name` quoted for SQL text, if it is one of `allowed` (a whitelist of plain names)."""
    if name not in allowed or not _IDENTIFIER.match(name):
        raise ValueError(f"{name!r} is not one of the identifiers allowed here: {sorted(allowed)}")
    return f'"{name}"'
