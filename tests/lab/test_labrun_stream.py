"""`lab run` itself: output streamed as it happens and in order, a timeout's own code, cleanup.

Two boots of the lab VM (TCG): run under `flock /tmp/threadwise-bench.lock`
on a shared machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.errors import LabTimeout

pytestmark = [pytest.mark.lab, pytest.mark.slow]

# Switches between stdout and stderr 0.3 s apart: lines written to both within the same instant
# come from two pipes and may swap (runtime/lab/labtee.py).
SCRIPT = ("echo start; sleep 0.3; echo to-stderr >&2; sleep 0.3; echo second; sleep 8; echo end >&2; "
          "sleep 0.3; echo done")


def test_output_streams_in_order_and_the_results_folder_goes(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-m", "threadwise.cli", "lab", "run", "--", "sh", "-c", SCRIPT]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    started = time.monotonic()
    seen: list[tuple[float, str]] = [(time.monotonic() - started, line.rstrip("\n")) for line in proc.stdout]
    assert proc.wait(timeout=600) == 0, seen
    lines = [line for _t, line in seen]
    at = {line: t for t, line in seen}
    output = [line for line in lines if not line.startswith("lab:")]
    assert output == ["start", "to-stderr", "second", "end", "done"], lines   # in the order written
    # beside another lab, the run first waits its turn (runtime/lab/turns.py) and says so; then boots
    turns = ("lab: waiting for its turn", "lab: its turn after", "lab: cannot take turns")
    assert next(line for line in lines if not line.startswith(turns)).startswith("lab: booting "), lines
    assert any(re.match(r"lab: guest up \(.+\) after [\d.]+ s", line) for line in lines), lines
    # printed as it happened: `start` well before the command's 8-s sleep ended
    assert at["end"] - at["start"] >= 6, seen
    assert lines[-1].startswith("lab: guest exit status 0;") and "results removed" in lines[-1]
    assert not list(tmp_path.glob("threadwise-lab-*")), "the results folder outlived a successful run"


def test_stdout_and_stderr_stay_apart(tmp_path: Path) -> None:
    out = tmp_path / "kept"
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "lab", "run", "--out", str(out), "--",
                           "sh", "-c", "echo o1; sleep 0.3; echo e1 >&2; sleep 0.3; echo o2; exit 3"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 9, done.stderr
    assert done.stdout == "o1\no2\n"
    assert "\ne1\n" in done.stderr and "lab: guest exit status 3;" in done.stderr
    assert (out / "stdout").read_text() == "o1\no2\n" and (out / "status").read_text().strip() == "3"


def test_a_timeout_has_its_own_exit_code(tmp_path: Path) -> None:
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "lab", "run", "--timeout", "15s", "--out",
                           str(tmp_path / "t"), "--", "sleep", "600"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == LabTimeout.exit_code == 10, done.stderr
    assert "did not finish within 15 s" in done.stderr and "Traceback" not in done.stderr
