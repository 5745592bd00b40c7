"""Read a profile TOML: tomllib for the syntax, pydantic for the schema, lines for both.

Every failure becomes a Diagnostic with the file, the line (and column for
syntax errors) and a hint; unknown keys name the keys that are allowed there.
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any

import pydantic

from threadwise.diagnostics import (
    Diagnostic,
    ProfileError,
    dotted_location,
    inner_model,
    short_value,
    syntax_diagnostic,
)
from threadwise.errors import UsageError
from threadwise.paths import require_text
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.schema import NAME_RULE, SCHEMA_VERSION, Profile


def load_profile(path: str | Path) -> tuple[Profile, SourceMap]:
    """Read and schema-check a profile file; raises UsageError or ProfileError."""
    text = read_text(path)
    return parse_profile(text, str(path))


def read_text(path: str | Path) -> str:
    file = Path(path)
    if not file.exists():
        raise UsageError(f"{file}: no such file", hint="check the path to the profile TOML")
    if file.is_dir():
        raise UsageError(f"{file}: is a directory, not a profile TOML")
    require_text(file, "a profile (TOML)")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as bad:
        raise ProfileError(
            str(file),
            [Diagnostic("encoding", f"not UTF-8 text ({bad.reason})", file=str(file), line=1)],
        ) from None


def parse_profile(text: str, file: str = "<profile>") -> tuple[Profile, SourceMap]:
    """Parse TOML text into a Profile and its source map, or raise ProfileError."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as bad:
        raise ProfileError(file, [syntax_diagnostic(str(bad), text, file)]) from None
    source = SourceMap(text)
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        line = source.line_of(("schema_version",)) or 1
        raise ProfileError(file, [_version_diagnostic(version, file, line)])
    try:
        profile = Profile.model_validate(raw)
    except pydantic.ValidationError as bad:
        errors = _without_misspelt_missing(bad.errors())
        diagnostics = [_schema_diagnostic(err, source, file) for err in errors]
        raise ProfileError(file, diagnostics) from None
    return profile, source


def _without_misspelt_missing(errors: list[Any]) -> list[Any]:
    """Drop "missing key K" where an unknown key beside it is a misspelling of K (its hint says so)."""
    unknown = {(tuple(e["loc"][:-1]), str(e["loc"][-1])) for e in errors if e["type"] == "extra_forbidden"}
    kept = []
    for err in errors:
        if err["type"] == "missing":
            parent, key = tuple(err["loc"][:-1]), str(err["loc"][-1])
            if any(p == parent and difflib.get_close_matches(k, [key], n=1) for p, k in unknown):
                continue
        kept.append(err)
    return kept




def _version_diagnostic(version: object, file: str, line: int) -> Diagnostic:
    message = (
        "missing schema_version"
        if version is None
        else f"schema_version {version!r} is not supported"
    )
    return Diagnostic(
        "schema_version",
        message,
        hint=f"this threadwise reads schema_version = {SCHEMA_VERSION}",
        path=("schema_version",),
        file=file,
        line=line,
    )


def _schema_diagnostic(err: Any, source: SourceMap, file: str) -> Diagnostic:
    loc = tuple(part for part in err["loc"] if isinstance(part, (str, int)))
    where = dotted_location(loc)
    kind = err["type"]
    hint: str | None = None
    if kind == "extra_forbidden":
        allowed = sorted(_allowed_keys(loc[:-1]))
        message = f"unknown key {where!r}"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = ((f"did you mean {close[0]!r}? " if close else "")
                + ("allowed here: " + ", ".join(allowed) if allowed else "")) or None
    elif kind == "string_pattern_mismatch" and loc and loc[-1] == "name":
        message = f"{where}: {short_value(err.get('input'))} is not a valid name"
        hint = f"a name is {NAME_RULE}"
    elif kind == "missing":
        message = f"missing required key {where!r}"
        hint = "add it; see docs/profile-schema.md"
    elif kind == "finite_number":
        message = f"{where}: nan and inf are not allowed"
        hint = "write a finite number"
    elif kind in {"literal_error", "enum"}:
        message = f"{where}: {err['msg']}"
    elif kind == "value_error":
        message = f"{where}: {err['msg'].removeprefix('Value error, ')}"
    else:
        message = f"{where}: {err['msg'].lower()}, got {short_value(err.get('input'))}"
    return Diagnostic(
        "schema",
        message,
        hint=hint or "see docs/profile-schema.md for the keys, types and ranges",
        path=loc,
        file=file,
        line=source.line_of(loc) or 1,
    )






def _allowed_keys(loc: tuple[str | int, ...]) -> set[str]:
    """The keys the model at `loc` accepts (aliases as written in TOML)."""
    model: Any = Profile
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {(f.alias or name): f for name, f in model.model_fields.items()}
        if part not in fields:
            return set()
        model = inner_model(fields[part].annotation)
        if model is None:
            return set()
    return {(f.alias or name) for name, f in model.model_fields.items()}

