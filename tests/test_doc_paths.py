"""Docs cite only files that exist (issue 21: REPORT.md cited a LAB.md the repository does not have).

Checked in README.md, docs/*.md, the notebooks' text, the committed training records and a
REPORT.md written now from a committed ladder file (generated text):
- every relative Markdown link resolves (from the citing file's folder);
- every path that starts at a top-level entry of the repository (`docs/lab.md`,
  `refine/report.py`, `tests/.../*.json`) exists, or as a glob matches something; paths with a
  placeholder (`profiles/NAME.toml`) and under build/ (written by a run) are not files to check;
- every bare upper-case Markdown name (`LAB.md`, `RESULTS.md`) is a file of the repository.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from threadwise.refine import report
from threadwise.refine.measure import store

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.~$-])((?:[\w.*-]+/)+[\w.*-]*[\w*])")
BARE_MD = re.compile(r"(?<![\w/.-])([A-Z][A-Z0-9_-]*\.md)\b")
PLACEHOLDER = re.compile(r"\b(NAME|IDX|OUT|DIR|FILE|PROFILE|CONFIG|CAPTURE)\b")


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [Path(name) for name in listed.decode().split("\0") if name]


TRACKED = _tracked()
TOP = {path.parts[0] for path in TRACKED}
NAMES = {path.name for path in TRACKED}


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "artifacts").glob("*/REPORT.md"))]


def _notebook_text(path: Path) -> str:
    return "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells
                     if cell.cell_type == "markdown")


def missing_paths(text: str, folder: Path) -> list[str]:
    """What `text` (a document in `folder`) cites that is not there."""
    missing = []
    for link in LINK.findall(text):
        target = link.split("#")[0]
        if target and not re.match(r"^[a-z][a-z+.-]*:", target) and not (folder / target).exists():
            missing.append(f"link {target}")
    for found in PATH.findall(LINK.sub("", text)):
        path = found.rstrip(".")
        top = path.split("/")[0]
        if top not in TOP or top == "build" or PLACEHOLDER.search(path):
            continue
        if not ((ROOT / path).exists() or any(fnmatch.fnmatch(str(tracked), path.rstrip("/"))
                                              for tracked in TRACKED)):
            missing.append(f"path {path}")
    missing += [f"file {name}" for name in BARE_MD.findall(text) if name not in NAMES]
    return list(dict.fromkeys(missing))


@pytest.mark.parametrize("doc", _docs(), ids=lambda doc: str(doc.relative_to(ROOT)))
def test_a_doc_cites_only_files_that_exist(doc):
    assert not missing_paths(doc.read_text(), doc.parent)


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda nb: nb.name)
def test_a_notebook_cites_only_files_that_exist(notebook):
    assert not missing_paths(_notebook_text(notebook), notebook.parent)


def test_a_report_written_now_cites_only_files_that_exist(tmp_path):
    con = store.open_ladder(ROOT / "artifacts" / "rolesim" / "ladder.duckdb", read_only=True)
    try:
        written = report.write_report(con, tmp_path)
    finally:
        con.close()
    assert not missing_paths(written.read_text(), tmp_path)


def test_the_check_finds_what_is_not_there():
    text = ("see LAB.md and [the lab](docs/LAB.md), `refine/nothing.py`, docs/lab.md, "
            "profiles/NAME.toml, build/demo/x.toml, tests/synthesize/fixtures/analysis/*.json")
    assert missing_paths(text, ROOT) == ["link docs/LAB.md", "path refine/nothing.py", "file LAB.md"]
