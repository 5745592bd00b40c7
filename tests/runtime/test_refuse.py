"""`apply` on a kernel without sched_ext refuses and names the lab (fast tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from threadwise import givenclock

SCHED_EXT = Path("/sys/kernel/sched_ext")
CONFIG = [
    {"name": "hot", "matches": [[{"CommPrefix": "tw-hot"}]], "kind": {"Confined": {"cpus_range": [1, 1]}}},
    {"name": "rest", "matches": [[]], "kind": {"Open": {}}},
]


@pytest.mark.skipif(SCHED_EXT.exists(), reason="this kernel has sched_ext: apply would not refuse")
def test_apply_refuses_with_lab_hint(tmp_path):
    config = tmp_path / "layered.json"
    config.write_text(json.dumps(CONFIG))
    done = givenclock.run(
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


def test_durations_are_read_like_everywhere_else(tmp_path):
    """`apply --duration` and `status --interval` take the spelling `observe -d` takes."""
    env = {**os.environ, "THREADWISE_RUN_DIR": str(tmp_path / "run")}

    def tw(*args: str) -> subprocess.CompletedProcess[str]:
        return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                              text=True, timeout=60, check=False, env=env)

    done = tw("apply", str(tmp_path / "any.json"), "--duration", "soon")
    assert done.returncode == 2 and "cannot read --duration 'soon'" in done.stderr
    assert "30s" in done.stderr   # the hint shows the one spelling
    assert tw("status", "--interval", "2 weeks").returncode == 2
    status = tw("status", "--interval", "0", "--json")   # 0: one read, allowed for --interval
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["applied"] is None
