"""`make notebook` stops cleanly when its PID gets SIGTERM: JupyterLab goes with it (issue 21).

make passes a SIGTERM on to the child running its recipe; the recipe `exec`s JupyterLab, so
that child IS JupyterLab, which shuts down on SIGTERM. The test starts `make -o setup notebook`
(`-o setup`: without the set-up step) in a session of its own on a free port, waits until
JupyterLab serves, sends SIGTERM to make's PID only, and checks that no process of that session
is left. Whatever would be left is killed by PID, and only processes of that session.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from threadwise import givenclock

ROOT = Path(__file__).resolve().parents[1]
START_S, STOP_S = 240.0, 60.0   # a loaded 2-core machine starts JupyterLab slowly


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _session(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":   # state, ppid, pgrp, session
            pids.append(int(entry.name))
    return pids


def _serving(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop_make_notebook(tmp_path: Path, makefile: Path = ROOT / "Makefile") -> tuple[list[int], str]:
    """Start `make notebook`, SIGTERM make's PID once JupyterLab serves; what is left, and the log."""
    port, log = _free_port(), tmp_path / "notebook.log"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    with log.open("w") as out:
        make = subprocess.Popen(["make", "-f", str(makefile), "-o", "setup", "notebook",
                                 f"NOTEBOOK_PORT={port}"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = givenclock.Deadline.start(make.pid, START_S)  # host time given, not wall time
        while not _serving(port):
            assert make.poll() is None, f"make notebook exited ({make.returncode}):\n{log.read_text()}"
            assert not deadline.passed(), (f"JupyterLab did not serve in {START_S} s "
                                           f"({deadline.describe()}):\n{log.read_text()}")
            time.sleep(0.5)
        started = _session(make.pid)
        assert len(started) >= 2, f"make and JupyterLab expected in the session, found {started}"
        make.send_signal(signal.SIGTERM)
        make.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while _session(make.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        return _session(make.pid), log.read_text()
    finally:
        for pid in _session(make.pid):   # only what this test started (its own session)
            os.kill(pid, signal.SIGKILL)
        if make.poll() is None:
            make.kill()
            make.wait()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "jupyter").exists(),
                    reason="needs make and JupyterLab in .venv (scripts/setup-python.sh)")
def test_sigterm_to_make_notebook_stops_jupyterlab(tmp_path):
    left, log = stop_make_notebook(tmp_path)
    assert not left, f"processes left after SIGTERM to make notebook: {left}\n{log}"
    assert "/lab?token=" in log   # it was JupyterLab serving the notebooks that stopped
    assert not list((tmp_path / "runtime").glob("jpserver-*.json")), "JupyterLab did not shut down cleanly"
