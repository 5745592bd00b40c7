"""docs/interfaces.md's exit-code table is whole: every error class of threadwise/errors.py sits in
the row of its exit code, every code has a row, and 130 (interrupted) is there."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from threadwise import errors

DOC = Path(__file__).parents[1] / "docs" / "interfaces.md"


def table() -> dict[int, set[str]]:
    rows: dict[int, set[str]] = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"\s*\| (\d+) \|.*\|([^|]*)\|\s*$", line)
        if match:
            rows[int(match.group(1))] = set(re.findall(r"`(\w+)`", match.group(2)))
    return rows


def test_every_error_class_is_in_the_row_of_its_exit_code() -> None:
    rows = table()
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.ThreadwiseError)]
    assert len(classes) > 20
    missing = [f"{c.__name__} (exit {c.exit_code})" for c in classes
               if c.__name__ not in rows.get(c.exit_code, set())]
    assert not missing, f"not in docs/interfaces.md's table: {missing}"
    named = {name for names in rows.values() for name in names}
    stale = named - {c.__name__ for c in classes}
    assert not stale, f"the table names classes errors.py does not define: {stale}"


def test_interrupted_is_130_in_the_cli_and_the_table() -> None:
    from threadwise import cli

    assert 130 in table()
    assert "return 130" in inspect.getsource(cli)
