"""benchmarks/claim_share.py reads what it claims to: a session's run and wait time, and the
quantiles of a lateness histogram, on real processes of this host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import claim_share

from tests.conftest import stop_by_pid

# 0.5 s of CPU, however long the host takes to give it (a busy host), then idle
SPIN_THEN_SLEEP = """
import time
while time.process_time() < 0.5:
    pass
print("spun", flush=True)
time.sleep(60)
"""


def test_quantiles_of_a_lateness_histogram() -> None:
    counts = {10: 980, 50: 10, 900: 9, 4000: 1}   # us -> wakes
    assert claim_share._quantile(counts, 0.5) == 10
    assert claim_share._quantile(counts, 0.99) == 50
    assert claim_share._quantile(counts, 0.999) == 900
    assert claim_share._quantile(counts, 1.0) == 4000


def test_session_schedstat_sums_the_whole_session_and_only_it() -> None:
    """A session child that spins 0.5 s of CPU: its session ran at least that long (schedstat
    ns), and a pid that leads no session has nothing."""
    child = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP], start_new_session=True,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spun"
        run_ns, wait_ns, slices = claim_share.session_schedstat(child.pid)
        assert run_ns >= 0.4e9, run_ns
        assert wait_ns >= 0 and slices >= 1
        assert claim_share.session_schedstat(2**22 + 1) == (0, 0, 0)   # above pid_max: no session
    finally:
        stop_by_pid(child)
