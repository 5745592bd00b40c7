"""Durations, written the same way on every command line: `30`, `30s`, `500ms`, `2m`, `1h`.

A bare number is seconds. Every option that takes a length of time (`observe
-d`, `apply --duration`, `apply --attach-timeout`, `status --interval`, `lab
run --timeout`, `demo --duration`) goes through `parse_duration`, so one
spelling works everywhere and nonsense gets the same message everywhere.
"""

from __future__ import annotations

import re

from threadwise.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MIN_DURATION_S = 0.1
MAX_DURATION_S = 24 * 3600
HINT = "write e.g. 30, 30s, 500ms, 2m or 1h (a bare number is seconds)"


def parse_duration(text: str, *, option: str = "duration", minimum_s: float = MIN_DURATION_S,
                   maximum_s: float = MAX_DURATION_S) -> float:
    """'10', '10s', '500ms', '2m' -> seconds; nonsense, or outside the bounds, is a UsageError."""
    match = _DURATION.match(text)
    if not match:
        raise UsageError(f"cannot read {option} {text!r}", hint=HINT)
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds < minimum_s:
        raise UsageError(f"{option} {text!r} is too short", hint=f"use at least {minimum_s:g}s")
    if seconds > maximum_s:
        raise UsageError(f"{option} {text!r} is longer than {maximum_s / 3600:g} h",
                         hint=f"use at most {maximum_s / 3600:g}h")
    return seconds


def optional_duration(text: str | None, *, option: str = "duration") -> float | None:
    """parse_duration for an option that may be absent."""
    return None if text is None else parse_duration(text, option=option)
