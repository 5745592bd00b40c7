"""Shared fixtures of the synthesize tests: the real scx_layered, its crate source, samples."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from threadwise.errors import MissingTool
from threadwise.synthesize import oracle
from threadwise.synthesize.example import example_profile
from threadwise.synthesize.matchers import SCX_LAYERED_VERSION
from threadwise.synthesize.schema import Profile
from threadwise.synthesize.writer import dumps


@pytest.fixture(scope="session")
def scx_binary() -> Path:
    """The pinned scx_layered binary; the oracle tests need the real one, so fail if absent."""
    try:
        return oracle.find_binary()
    except MissingTool as missing:
        pytest.fail(f"{missing.message}: {missing.hint}")


@pytest.fixture(scope="session")
def crate_src() -> Path:
    """The scx_layered crate source cargo fetched (config.rs, main.rs, intf.h)."""
    home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    found = sorted(glob.glob(f"{home}/registry/src/*/scx_layered-{SCX_LAYERED_VERSION}"))
    if not found:
        pytest.fail(f"scx_layered {SCX_LAYERED_VERSION} crate source not under {home}/registry/src:"
                    " run scripts/setup-scx.sh (cargo install fetches it)")
    return Path(found[-1])


@pytest.fixture
def example() -> Profile:
    return example_profile()


@pytest.fixture
def example_text(example: Profile) -> str:
    return dumps(example)
