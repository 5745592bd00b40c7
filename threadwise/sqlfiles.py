"""SQL modules: the stages' queries live in `.sql` files, never in Python strings.

A `.sql` file holds one statement, or several, each introduced by a line
`-- name: NAME` and followed by its header: what it returns, each column with
its type and meaning, and its parameters (bound by name or position, never
pasted into the text). Text before the first `-- name:` line is the file's own
header. Perfetto's stdlib is the model (DESIGN.md: "SQL as modules").

Where an identifier cannot be a bound parameter (a table name in `INSERT INTO
{table}`), `identifier` admits only names from a whitelist the caller states,
and quotes them; anything else is a programming error (ValueError). Values are
always bound (`placeholders(n)` writes the markers). Typed rows (one dataclass per
table) are appended by `insert_rows`, the one INSERT both stores use.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, Protocol

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


class Connection(Protocol):
    """What `insert_rows` needs of a DuckDB connection (this module does not import duckdb)."""

    def execute(self, query: str, parameters: object = ...) -> Any: ...
    def complete(self) -> Any: ...
    def register(self, view_name: str, python_object: object) -> Any: ...
    def unregister(self, view_name: str) -> Any: ...


def _bound(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value   # DuckDB lists, not structs


def insert_rows(con: Connection, table: str, rows: Sequence[object], kinds: Mapping[str, type]) -> None:
    """Append `rows` to `table`: each an instance of its dataclass `kinds[table]` (whose fields
    are the table's columns), values bound. One row is one statement; many go as one Arrow batch
    (executemany cost the observer ~0.2 s per /proc scan of hackbench's 160 threads). A row of
    another type is a TypeError before anything is written."""
    quoted = identifier(table, kinds)
    kind = kinds[table]
    if not rows:
        return
    if any(type(row) is not kind for row in rows):
        raise TypeError(f"{table} takes {kind.__name__} rows")
    columns = [f.name for f in dataclasses.fields(kind)]
    names = ", ".join(identifier(column, columns) for column in columns)
    if len(rows) == 1:
        con.execute(f"INSERT INTO {quoted} ({names}) VALUES ({placeholders(len(columns))})",
                    [_bound(getattr(rows[0], column)) for column in columns])
        return
    import pyarrow as pa  # only here: the basics stay light for `threadwise --help`

    batch = pa.table({column: [_bound(getattr(row, column)) for row in rows] for column in columns})
    con.complete()   # a result the caller left unfetched (a fetchone) would make DuckDB refuse register
    con.register("_rows", batch)
    try:
        con.execute(f"INSERT INTO {quoted} ({names}) SELECT {names} FROM _rows")
    finally:
        con.unregister("_rows")
