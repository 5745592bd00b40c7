"""Where a key of a TOML document is: paths like ("group", 2, "match", 1) -> line.

Problem: tomllib parses strictly and reports syntax errors with line and
column, but the values it returns carry no positions, so a schema or rule
error ("group 3: pattern 2 is a suffix") could not name its line.

Approach: after tomllib accepted the text (so it is valid TOML), a small
scanner walks it once: table headers (`[a.b]`, `[[a]]` with a running index
per array of tables), `key = value` lines with dotted keys, and inside values
the elements of arrays and keys of inline tables. It records the line where
each path starts. A lookup falls back to the longest known prefix, so a
missing key is reported at its table's header. The scanner never raises: on
anything it does not understand it stops and keeps what it has.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Sequence

Path = tuple[str | int, ...]
_BARE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class SourceMap:
    """Line numbers (1-based) of the keys and array elements of one TOML text."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        self._lines: dict[Path, int] = {}
        self._aot: dict[Path, int] = {}
        with contextlib.suppress(IndexError, ValueError):
            self._scan()

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line of `path`, or of its longest known prefix; None for the root."""
        parts = tuple(path)
        while parts:
            if parts in self._lines:
                return self._lines[parts]
            parts = parts[:-1]
        return None

    # -- scanner -------------------------------------------------------------

    def _line(self, pos: int) -> int:
        return bisect.bisect_right(self._starts, pos)

    def _record(self, path: Path, pos: int) -> None:
        self._lines.setdefault(path, self._line(pos))

    def _skip_blank(self, pos: int, newlines: bool) -> int:
        text = self._text
        while pos < len(text):
            ch = text[pos]
            if ch in " \t\r" or (newlines and ch == "\n"):
                pos += 1
            elif ch == "#":
                end = text.find("\n", pos)
                pos = len(text) if end < 0 else end
            else:
                break
        return pos

    def _key(self, pos: int) -> tuple[tuple[str, ...], int]:
        """A dotted key starting at pos; returns its parts and the position after it."""
        text = self._text
        parts: list[str] = []
        while True:
            pos = self._skip_blank(pos, newlines=False)
            ch = text[pos]
            if ch in "\"'":
                end = self._string_end(pos)
                raw = text[pos + 1 : end - 1]
                parts.append(raw if ch == "'" else _unescape(raw))
                pos = end
            else:
                start = pos
                while pos < len(text) and text[pos] in _BARE:
                    pos += 1
                if pos == start:
                    raise ValueError("no key")
                parts.append(text[start:pos])
            pos = self._skip_blank(pos, newlines=False)
            if pos < len(text) and text[pos] == ".":
                pos += 1
                continue
            return tuple(parts), pos

    def _string_end(self, pos: int) -> int:
        text = self._text
        quote = text[pos]
        if text.startswith(quote * 3, pos):
            end = text.index(quote * 3, pos + 3) + 3
            while end < len(text) and text[end] == quote:  # up to two quotes inside
                end += 1
            return end
        pos += 1
        while text[pos] != quote:
            pos += 2 if quote == '"' and text[pos] == "\\" else 1
        return pos + 1

    def _resolve(self, key: tuple[str, ...]) -> Path:
        """A header key with the current index of every array of tables it passes."""
        path: Path = ()
        for part in key:
            path = (*path, part)
            if path in self._aot:
                path = (*path, self._aot[path])
        return path

    def _scan(self) -> None:
        text = self._text
        table: Path = ()
        pos = 0
        while True:
            pos = self._skip_blank(pos, newlines=True)
            if pos >= len(text):
                return
            if text.startswith("[[", pos):
                key, pos = self._key(pos + 2)
                base = (*self._resolve(key[:-1]), key[-1])
                self._aot[base] = self._aot.get(base, -1) + 1
                table = (*base, self._aot[base])
                self._record(base, pos)
                self._record(table, pos)
                pos = text.index("]]", pos) + 2
            elif text[pos] == "[":
                key, pos = self._key(pos + 1)
                table = self._resolve(key)
                self._record(table, pos)
                pos = text.index("]", pos) + 1
            else:
                key, pos = self._key(pos)
                path = table + key
                self._record(path, pos)
                pos = self._skip_blank(pos, newlines=False) + 1  # the '='
                pos = self._value(self._skip_blank(pos, newlines=False), path)

    def _value(self, pos: int, path: Path) -> int:
        text = self._text
        ch = text[pos]
        if ch in "\"'":
            return self._string_end(pos)
        if ch == "[":
            return self._container(pos + 1, path, "]", inline_table=False)
        if ch == "{":
            return self._container(pos + 1, path, "}", inline_table=True)
        while pos < len(text) and text[pos] not in ",]}\n#":
            pos += 1
        return pos

    def _container(self, pos: int, path: Path, close: str, inline_table: bool) -> int:
        text = self._text
        index = 0
        while True:
            pos = self._skip_blank(pos, newlines=True)
            if text[pos] == close:
                return pos + 1
            if inline_table:
                key, pos = self._key(pos)
                self._record(path + key, pos)
                pos = self._skip_blank(pos, newlines=False) + 1
                pos = self._value(self._skip_blank(pos, newlines=False), path + key)
            else:
                self._record((*path, index), pos)
                pos = self._value(pos, (*path, index))
            pos = self._skip_blank(pos, newlines=True)
            if text[pos] == ",":
                pos += 1
                index += 1


def _unescape(raw: str) -> str:
    try:
        return raw.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return raw
