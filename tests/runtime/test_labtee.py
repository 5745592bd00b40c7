"""The lab guest's output splitter (runtime/lab/labtee.py), run on this host: order, status, no waiting."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from threadwise import givenclock
from threadwise.runtime.lab import labtee


def _run(tmp_path: Path, script: str) -> tuple[int, float]:
    started = time.monotonic()
    done = givenclock.run([sys.executable, "-P", labtee.__file__, str(tmp_path), "--", "sh", "-c", script],
                          check=False, timeout=60)
    return done.returncode, time.monotonic() - started


def test_lines_keep_their_stream_and_order(tmp_path: Path) -> None:
    status, _ = _run(tmp_path, "echo o1; sleep 0.2; echo e1 >&2; sleep 0.2; echo o2; sleep 0.2; "
                               "printf 'e2 no newline' >&2; exit 3")
    assert status == 3
    assert (tmp_path / "stream").read_text() == "O o1\nE e1\nO o2\nE e2 no newline\n"
    assert (tmp_path / "stdout").read_text() == "o1\no2\n"
    assert (tmp_path / "stderr").read_text() == "e1\ne2 no newline"


def test_a_background_child_holding_the_pipes_is_not_waited_for(tmp_path: Path) -> None:
    status, took = _run(tmp_path, "sleep 30 & echo started")
    assert status == 0 and took < 10
    assert (tmp_path / "stream").read_text() == "O started\n"


def test_a_missing_program_is_status_127(tmp_path: Path) -> None:
    done = givenclock.run([sys.executable, "-P", labtee.__file__, str(tmp_path), "--", "/no/such/program"],
                          check=False, timeout=60)
    assert done.returncode == 127
    assert (tmp_path / "stream").read_text().startswith("E /no/such/program: ")
