"""Test tiers: unmarked tests are fast; `bpf` traces this host; `lab` boots the sched_ext VM.

A tier that cannot run here is skipped with the exact reason (what is missing
and how to get it), never silently.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def bpf_missing() -> str | None:
    """Why the bpf tier cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "bpf tier needs root (bpftrace loads BPF programs): run the tests as root"
    if shutil.which("bpftrace") is None:
        return "bpf tier needs bpftrace: run scripts/setup-system.sh"
    if not Path("/sys/kernel/tracing/events/sched/sched_switch").exists():
        return "bpf tier needs tracefs: mount -t tracefs nodev /sys/kernel/tracing"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = bpf_missing()
    if reason is None:
        return
    for item in items:
        if "bpf" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
