"""`apply` on a kernel without sched_ext refuses and names the lab (fast tier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCHED_EXT = Path("/sys/kernel/sched_ext")
CONFIG = [
    {"name": "hot", "matches": [[{"CommPrefix": "tw-hot"}]], "kind": {"Confined": {"cpus_range": [1, 1]}}},
    {"name": "rest", "matches": [[]], "kind": {"Open": {}}},
]


@pytest.mark.skipif(SCHED_EXT.exists(), reason="this kernel has sched_ext: apply would not refuse")
def test_apply_refuses_with_lab_hint(tmp_path):
    config = tmp_path / "layered.json"
    config.write_text(json.dumps(CONFIG))
    done = subprocess.run(
        [sys.executable, "-m", "threadwise.cli", "apply", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 5, done.stderr  # MissingTool
    assert "has no sched_ext" in done.stderr
    assert "hint:" in done.stderr and "threadwise lab run" in done.stderr
    assert "Traceback" not in done.stderr
