"""Problems found in a profile, each with file, line, rule name and a hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from threadwise.errors import InputError

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


class ProfileError(InputError):
    """A profile cannot be read or is invalid; carries every diagnostic found."""

    def __init__(self, file: str, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        bad = errors(diagnostics) or diagnostics
        first = bad[0]
        if len(bad) == 1:
            message = f"{first.location()}: {first.message} [{first.rule}]"
            hint = first.hint
        else:
            message = f"{file}: {len(bad)} problems (first: line {first.line}: {first.message})"
            hint = "run `threadwise validate` on the file to see each problem"
        super().__init__(message, hint=hint)
