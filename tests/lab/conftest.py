"""The `lab` tier: tests that boot the sched_ext lab VM (TCG) and run inside it.

Every test here is marked `lab`. When a prerequisite is missing the tests skip
with the reason and the command that fixes it; on a machine set up by
scripts/setup.sh they all run. Timings are TCG timings (no KVM here).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from threadwise.errors import MissingTool
from threadwise.runtime import scx
from threadwise.runtime.lab import kernel
from threadwise.runtime.lab import vng as lab


def missing_prerequisite() -> str | None:
    """Why the lab cannot run here (with the fix), or None."""
    if not kernel.cached_kernels():
        return "lab kernel not in cache: run threadwise lab kernel"
    checks: list[tuple[str, Callable[[], object]]] = [
        ("virtme-ng", lab.find_vng),
        ("virtiofsd", lab.find_virtiofsd),
        ("scx_layered", scx.scx_layered_path),
    ]
    for name, check in checks:
        try:
            check()
        except MissingTool as missing:
            return f"{name} missing: {missing.hint or missing.message}"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 missing: run scripts/setup-system.sh"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = missing_prerequisite()
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.lab)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
