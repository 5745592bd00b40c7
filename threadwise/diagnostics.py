"""Problems found in a TOML input (a profile, a workload file), each with file, line, rule name and
a hint; and how tomllib's syntax errors and pydantic's schema errors become them. A core basic:
synthesize's profile reader and refine's workload reader both build on it."""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from threadwise.errors import ProfileError

if TYPE_CHECKING:
    import pydantic

__all__ = ["Diagnostic", "ProfileError", "Severity", "dotted_location", "errors", "inner_model",
           "short_value", "syntax_diagnostic"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Diagnostic:
    """One problem: `rule` names the check, `path` the TOML key it is about."""

    rule: str
    message: str
    hint: str | None = None
    severity: Severity = "error"
    path: tuple[str | int, ...] = ()
    file: str = "<profile>"
    line: int | None = None
    column: int | None = None
    threads: tuple[str, ...] = field(default=())

    def location(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where

    def render(self) -> str:
        text = f"{self.location()}: {self.severity}[{self.rule}]: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
            "threads": list(self.threads),
        }


def errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity == "error"]


# --- from tomllib's and pydantic's errors (profiles and workload files alike) ---

_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def syntax_diagnostic(message: str, text: str, file: str) -> Diagnostic:
    found = _AT.search(message)
    if found:
        line, column = int(found.group(1)), int(found.group(2))
        message = message[: found.start()]
    else:  # "(at end of document)"
        line, column = text.count("\n") + 1, None
        message = message.replace(" (at end of document)", " at the end of the file")
    return Diagnostic(
        "toml_syntax",
        f"invalid TOML: {message}",
        hint="fix the TOML syntax at this position (TOML 1.0; strings need quotes)",
        file=file,
        line=line,
        column=column,
    )


def dotted_location(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(top level)"


def short_value(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def inner_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The pydantic model inside a field's annotation (a list of it, an optional one), or None."""
    import pydantic  # a heavy import, only for the schema errors that need it

    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = inner_model(arg)
            if found is not None:
                return found
    return None
