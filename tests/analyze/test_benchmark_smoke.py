"""The 10M benchmark script still runs (at a small size; the real run is manual)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from threadwise import givenclock

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "analyze_10m.py"


@pytest.mark.slow
def test_benchmark_script_runs_small(tmp_path):
    done = givenclock.run([sys.executable, str(SCRIPT), "--events", "200000", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "events/s" in done.stdout and "peak RSS" in done.stdout
    assert not any(tmp_path.iterdir())   # the generated capture is removed without --keep
