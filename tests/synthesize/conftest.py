"""Shared fixtures of the synthesize tests: the real scx_layered, its crate source, samples.

Tests that use `scx_binary` or `crate_src` are marked `scx` (tests/conftest.py
skips them, with the reason, where scripts/setup-scx.sh has not run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import crate_source, scx_missing
from threadwise.synthesize import oracle
from threadwise.synthesize.example import example_profile
from threadwise.synthesize.schema import Profile
from threadwise.synthesize.writer import dumps


@pytest.fixture(scope="session")
def scx_binary() -> Path:
    """The pinned scx_layered binary (tests using it are marked scx: skipped where it is missing)."""
    reason = scx_missing(source=False)
    if reason:   # reached only if the skip did not apply: fail loudly rather than pass vacuously
        pytest.fail(reason)
    return oracle.find_binary()


@pytest.fixture(scope="session")
def crate_src() -> Path:
    """The scx_layered crate source cargo fetched (config.rs, main.rs, intf.h)."""
    found = crate_source()
    if found is None:
        pytest.fail(scx_missing(source=True) or "no scx_layered crate source")
    return found


@pytest.fixture
def example() -> Profile:
    return example_profile()


@pytest.fixture
def example_text(example: Profile) -> str:
    return dumps(example)
