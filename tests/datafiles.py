"""Test inputs kept as files: the profiles and workload files tests read, under tests/data/ by the
area of the tests that read them (a test edits its copy of the text where it needs a bad input);
and the two ways tests look into such a text: the line of a fragment, a profile's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadwise.diagnostics import Diagnostic, ProfileError
from threadwise.synthesize.reader import parse_profile

DATA = Path(__file__).resolve().parent / "data"
# rolesim's record of 2026-11-26 (its final profile: hot-0 exclusive, workers and feeder latency,
# 5 groups), kept when rolesim was retrained: the profile the lab's signal and blocker tests hold
OLD_ROLESIM = Path(__file__).resolve().parent / "refine" / "fixtures" / "records" / "rolesim-2026-11-26"
OLD_ROLESIM_PROFILE = OLD_ROLESIM / "rolesim.not-a-profile.toml"
# Redis's record of 2026-11-26 (schema 5, no null arm; one profile cell whose spinners never ran),
# kept when Redis was retrained (every cell of the new record valid): the tests of invalid cells
OLD_REDIS = OLD_ROLESIM.parent / "redis-2026-11-26"
OLD_REDIS_LADDER = OLD_REDIS / "ladder.duckdb"


def text(name: str) -> str:
    """The text of tests/data/NAME, exactly as stored (line numbers in assertions count from it)."""
    return (DATA / name).read_text(encoding="utf-8")


def line_of(text: str, fragment: str) -> int:
    """1-based line of the first line containing `fragment` (so tests hold no line numbers)."""
    return next(n for n, line in enumerate(text.splitlines(), start=1) if fragment in line)


def profile_diagnostics(text: str) -> list[Diagnostic]:
    """What reading `text` as the profile p.toml refuses (it must refuse)."""
    with pytest.raises(ProfileError) as caught:
        parse_profile(text, "p.toml")
    return caught.value.diagnostics
