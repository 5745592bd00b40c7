"""Problems found in a profile, each with file, line, rule name and a hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from threadwise.errors import ProfileError

__all__ = ["Diagnostic", "ProfileError", "Severity", "errors"]

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

