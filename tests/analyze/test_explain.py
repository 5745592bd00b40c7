"""`analyze --explain` and docs/analyze.md explain every column `analyze` prints, and the treatments."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from threadwise.analyze import analyze_capture
from threadwise.analyze.render import GLOSSARY, TREATMENTS, render
from threadwise.observe.builder import CaptureBuilder

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000
T0 = 1_000_000_000


def _terms() -> set[str]:
    return {part.strip() for term, _ in GLOSSARY for part in term.split(",")}


def test_every_column_of_the_output_is_explained(tmp_path: Path) -> None:
    cap = CaptureBuilder(target_tgids=[100])
    cap.thread(100, 100, "app")
    cap.thread(101, 100, "feeder")
    cap.thread(102, 100, "worker-1")
    cap.periodic(101, 0, first_ts=T0, run_ns=100_000, period_ns=10 * MS, count=50)
    cap.periodic(102, 1, first_ts=T0 + 80_000, run_ns=200_000, period_ns=10 * MS, count=50, waker=101,
                 latency_ns=30_000)
    text = render(analyze_capture(cap.write(tmp_path / "c.duckdb")))
    headers: set[str] = set()
    for line in text.splitlines():
        if line.strip().startswith(("pattern ", "waker ")):
            headers |= {h.strip() for h in re.split(r"\s{2,}", line.strip())}
    assert {"lift", "wake-cv", "rq-behind-other", "preempted", "demand"} <= headers
    assert headers - _terms() == set(), "columns without an explanation in analyze.render.GLOSSARY"
    assert "names separate roles" in text and "threadwise analyze --explain" in text.splitlines()[-1]


def test_the_doc_holds_the_same_glossary() -> None:
    doc = (ROOT / "docs" / "analyze.md").read_text()
    assert "## Reading the output" in doc
    for term, _ in GLOSSARY + TREATMENTS:
        assert term in doc, term
    assert "docs/analyze.md" in (ROOT / "README.md").read_text()


def test_explain_needs_no_capture() -> None:
    done = subprocess.run([sys.executable, "-m", "threadwise.cli", "analyze", "--explain"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for word in ("lift", "wake-cv", "rq-behind-other", "preempted", "names separate roles", "feeder (66)",
                 "demand", "exclusive", "housekeeping"):
        assert word in done.stdout, word
