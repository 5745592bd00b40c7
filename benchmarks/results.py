"""benchmarks/RESULTS.md: measured tables, one section per benchmark script, each rewritten by its script.

Problem: benchmark numbers pasted by hand drift from what the scripts measure, and a table
without its command, date and machine cannot be reproduced or judged.
Approach: each script builds its section's text from what it just measured and calls
`write_section`, which replaces only that section (between its markers) and keeps the others;
`machine()` describes the host the numbers come from, `child()` runs one measured child process.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
# The real CLI through this interpreter, so a benchmark measures the checkout it runs from: a venv's
# `bin/threadwise` script carries the shebang of the venv that installed it, which may be another
# checkout's (a worktree sharing a venv layout ran /work/main's threadwise on a newer capture).
CLI = [sys.executable, "-m", "threadwise.cli"]
HEADER = """# Benchmark results

Generated: every section below is written by the script it names, from numbers that script
measured in that run (`--write-results`); do not edit by hand. Runs are serialised with
`flock /tmp/threadwise-bench.lock` because the host is shared with other measurements.
"""


def machine() -> str:
    """`N cores (model), M GB RAM, kernel K`: the host the numbers come from."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({model or platform.processor()}), {mem_gb:.0f} GB RAM, "
            f"kernel {platform.release()}")


def stamp(command: str) -> str:
    """The lines every section starts with: command, date, machine, load."""
    load = os.getloadavg()
    return (f"Command: `{command}`  \n"
            f"Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}  \n"
            f"Machine: {machine()}  \n"
            f"Load average when it started: {load[0]:.1f} (1 min), {load[1]:.1f} (5 min)\n")


def write_section(name: str, body: str, results: Path = RESULTS) -> Path:
    """Replace section `name` of `results` (benchmarks/RESULTS.md; a research folder passes its own)
    with `body` (created with its header if missing)."""
    text = results.read_text() if results.exists() else HEADER
    begin, end = f"<!-- section: {name} -->", f"<!-- end: {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text.rstrip()}\n\n{block}\n"
    results.write_text(text if text.endswith("\n") else text + "\n")
    return results


def child(argv: list[str]) -> tuple[float, float, int, str]:
    """Run argv; its wall seconds, peak RSS in MB (that child only, os.wait4), exit code, stdout."""
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=sys.stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return wall, usage.ru_maxrss / 1024, proc.returncode, out.read()
