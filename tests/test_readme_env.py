"""The README documents every THREADWISE_* environment variable the code, scripts and notebooks
read or set (issue 21: it named one of them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = re.compile(r"\bTHREADWISE_[A-Z][A-Z0-9_]*[A-Z0-9]\b")
SOURCES = (".py", ".sh", ".ipynb", ".c", ".bt")


def _used() -> dict[str, list[str]]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    used: dict[str, list[str]] = {}
    for name in listed.decode().split("\0"):
        path = ROOT / name
        listed_too = name in ("Makefile", "runtime/lab/guest/init")
        if name and (name.endswith(SOURCES) or listed_too) and path.is_file():
            for variable in set(VARIABLE.findall(path.read_text(errors="replace"))):
                used.setdefault(variable, []).append(name)
    return used


def test_every_threadwise_variable_is_in_the_readme():
    used = _used()
    assert {"THREADWISE_CACHE", "THREADWISE_CAPTURE", "THREADWISE_PROFILE", "THREADWISE_LADDER"} <= set(used)
    documented = set(VARIABLE.findall((ROOT / "README.md").read_text()))
    missing = {variable: files for variable, files in used.items() if variable not in documented}
    assert not missing, f"document these in README.md's 'Environment variables': {missing}"
