"""Every notebook runs top to bottom, headless, on inputs this test run has (and shows them).

NotebookClient raises on a failing cell, so "no error outputs" proves nothing;
instead each test checks what the notebook displayed: the input it was given
(not its default path), content only that input has, and its plots (PNG
outputs). Inputs:
- explore_capture: a synthetic capture (tests/synthetic/bulk.py), and in the bpf
  tier the shared live rolesim capture;
- compare_ladder: the ladder file refine wrote for the committed rolesim
  profile (artifacts/rolesim/ladder.duckdb: real runs, invalid cells included),
  and every committed ladder file (the records' and benchmarks/data's) in one kernel;
- review_profile: a profile synthesized here from the synthetic capture, and in
  the bpf tier from the live rolesim capture.
Each run prints its wall time (pytest -s shows them).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import duckdb
import nbformat
import pytest

from tests.datafiles import OLD_REDIS_LADDER
from tests.kernels import execute
from tests.synthetic.bulk import bulk_capture
from threadwise import givenclock

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Plots each notebook draws (PNG outputs), whatever its input.
PLOTS = {"explore_capture.ipynb": 4, "compare_ladder.ipynb": 2, "review_profile.ipynb": 2}
LADDER = ROOT / "artifacts" / "rolesim" / "ladder.duckdb"
REDIS_LADDER = OLD_REDIS_LADDER   # a record with an invalid cell (tests/datafiles.py)


def _run(name: str, monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[str, int]:
    """Execute notebooks/NAME with `env`; all text/plain and stream text shown, and PNGs drawn."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = ROOT / "notebooks" / name
    nb = nbformat.read(notebook, as_version=4)
    began = time.monotonic()
    execute(nb, notebook.parent, timeout=300)
    print(f"notebook {name}: executed in {time.monotonic() - began:.1f} s with {env}")
    texts, images = [], 0
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            images += "image/png" in data
            texts.append(data.get("text/plain", "") + output.get("text", ""))
    text = "\n".join(texts)
    assert images >= PLOTS[name], f"{name} drew {images} plots, expected {PLOTS[name]}"
    return text, images


def _synthesize(capture: Path, out: Path, name: str) -> Path:
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "synthesize", str(capture), "-n", name,
                           "-o", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return out


def test_every_notebook_is_run_here():
    assert {notebook.name for notebook in NOTEBOOKS} == set(PLOTS)


@pytest.fixture(scope="module")
def synthetic_capture(tmp_path_factory):
    return bulk_capture(tmp_path_factory.mktemp("notebooks") / "synthetic.duckdb", switches=40_000)


def _cpu_never_exceeds_the_cpus(text: str) -> None:
    """explore_capture's CPU-over-time plots: no thread holds more than a CPU in a bin, and all of
    them together no more than the capture's CPUs (issue 34: slices binned by their start put a
    960 ms slice into one 100 ms bin: ~10 "CPUs busy" on a 2-CPU capture)."""
    busiest = float(re.search(r"busiest thread in one bin: ([0-9.]+) of a CPU", text).group(1))
    total, cpus = re.search(r"CPUs busy in one bin: at most ([0-9.]+) of the capture's (\d+) CPUs",
                            text).groups()
    assert 0 < busiest <= 1.0 + 1e-6, busiest
    assert 0 < float(total) <= int(cpus) + 1e-6, (total, cpus)


def test_explore_capture_on_a_synthetic_capture(synthetic_capture, monkeypatch):
    text, _ = _run("explore_capture.ipynb", monkeypatch, THREADWISE_CAPTURE=str(synthetic_capture))
    assert str(synthetic_capture) in text, "the notebook did not read $THREADWISE_CAPTURE"
    assert "synthetic" in text   # the capture row's tracer_backend: this capture, not a demo one
    assert "hot-*" in text and "worker-*" in text   # bulk.py's thread classes, grouped by analyze
    assert "timeline: " in text and "slices in the window" in text
    # bulk.py's 450 ms slice of other-5: binned by its start, the stack read 6.2 CPUs busy of 2
    _cpu_never_exceeds_the_cpus(text)


def test_compare_ladder_on_the_ladder_refine_wrote(ladders, monkeypatch):
    text, _ = _run("compare_ladder.ipynb", monkeypatch, THREADWISE_LADDER=str(ladders[LADDER]))
    assert str(ladders[LADDER]) in text
    assert "hot_chunks_per_s" in text and "better" in text   # the run's primary metric and verdicts
    con = duckdb.connect(str(LADDER), read_only=True)
    invalid = con.execute("SELECT count(*) FROM cell WHERE NOT valid").fetchone()[0]
    con.close()
    assert f"{invalid} invalid cell(s) in the file" in text   # the count the file holds


@pytest.fixture(scope="module")
def ladders(tmp_path_factory) -> dict[Path, Path]:
    """Every committed ladder file -> a copy at this threadwise's ladder schema (opened writable once,
    as `threadwise rejudge` would; the notebook reads a file as it is, and says so of an older one)."""
    from threadwise.refine.measure import store

    work = tmp_path_factory.mktemp("ladders")
    copies = {}
    for path in _ladder_files():
        copy = work / f"{path.parent.name}-{path.name}"
        shutil.copyfile(path, copy)
        store.open_ladder(copy).close()
        copies[path] = copy
    return copies


def _ladder_files() -> list[Path]:
    """Every committed ladder file: the training records', the benchmarks' data (the files that
    hold a ladder_meta table; benchmarks/data may hold other DuckDB files too) and the older records
    kept as test fixtures."""
    found = []
    for path in sorted([*ROOT.glob("artifacts/*/ladder.duckdb"), *ROOT.glob("benchmarks/data/*.duckdb"),
                        *ROOT.glob("tests/refine/fixtures/records/*/ladder.duckdb")]):
        con = duckdb.connect(str(path), read_only=True)
        try:
            tables = {row[0] for row in
                      con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        finally:
            con.close()
        if "ladder_meta" in tables:
            found.append(path)
    return found


def test_compare_ladder_runs_on_every_committed_ladder_file(ladders):
    """Issue 34: the notebook crashed on the poolservice record (insufficient levels: no interval).
    One kernel runs the notebook's code once per file (a kernel start per file would take minutes)."""
    assert {"poolservice", "redis", "rolesim"} <= {p.parent.name for p in ladders} and len(ladders) > 3
    files = list(ladders.values())
    template = nbformat.read(ROOT / "notebooks" / "compare_ladder.ipynb", as_version=4)
    code = [cell.source for cell in template.cells if cell.cell_type == "code"]
    nb = nbformat.v4.new_notebook()
    for path in files:
        nb.cells.append(nbformat.v4.new_code_cell(
            f"import os\nos.environ['THREADWISE_LADDER'] = {str(path)!r}\n"
            "os.environ.pop('THREADWISE_LADDER_RUN', None)"))
        nb.cells += [nbformat.v4.new_code_cell(source) for source in code]
    began = time.monotonic()
    execute(nb, ROOT / "notebooks", timeout=900)
    print(f"compare_ladder on {len(files)} ladder files in {time.monotonic() - began:.1f} s")
    per_file = len(code) + 1
    for i, path in enumerate(files):
        outputs = [o for cell in nb.cells[i * per_file:(i + 1) * per_file] for o in cell.get("outputs", [])]
        text = "\n".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in outputs)
        images = sum("image/png" in o.get("data", {}) for o in outputs)
        assert str(path) in text and re.search(r"run \d+: .*cells, \d+ invalid", text), (path, text[:500])
        assert images == PLOTS["compare_ladder.ipynb"], (path, images)


def test_compare_ladder_shows_invalid_cells_and_their_reasons(ladders, monkeypatch):
    text, _ = _run("compare_ladder.ipynb", monkeypatch, THREADWISE_LADDER=str(ladders[REDIS_LADDER]))
    assert str(ladders[REDIS_LADDER]) in text and "get_rps" in text
    # the old Redis record's profile cell whose spinners never ran (committed data), with its reason
    con = duckdb.connect(str(REDIS_LADDER), read_only=True)
    invalid = con.execute("SELECT reasons FROM cell WHERE NOT valid").fetchall()
    con.close()
    assert invalid, "the committed Redis record has an invalid cell to show"
    assert f"{len(invalid)} invalid cell(s) in the file" in text
    assert invalid[0][0][:60] in text


def test_review_profile_on_a_synthesized_profile(synthetic_capture, tmp_path, monkeypatch):
    profile = _synthesize(synthetic_capture, tmp_path / "bulk.toml", "bulkreview")
    text, _ = _run("review_profile.ipynb", monkeypatch, THREADWISE_PROFILE=str(profile),
                   THREADWISE_CAPTURE=str(synthetic_capture))
    assert str(profile) in text and "bulkreview" in text
    # threads placed in the groups that take them (a merged group's long list is elided by polars)
    assert "hot-0" in text and "worker-" in text
    assert "left to the catch-all layer" in text


@pytest.mark.bpf
def test_notebooks_on_a_live_rolesim_capture(rolesim_capture, tmp_path, monkeypatch):
    text, _ = _run("explore_capture.ipynb", monkeypatch, THREADWISE_CAPTURE=str(rolesim_capture))
    assert str(rolesim_capture) in text and "feeder" in text and "worker-*" in text
    _cpu_never_exceeds_the_cpus(text)   # a real capture: hot-0's slices last up to a second
    profile = _synthesize(rolesim_capture, tmp_path / "rolesim.toml", "rolesimreview")
    text, _ = _run("review_profile.ipynb", monkeypatch, THREADWISE_PROFILE=str(profile),
                   THREADWISE_CAPTURE=str(rolesim_capture))
    assert "rolesimreview" in text and "worker-0" in text and "hot-0" in text
    assert "0 left to the catch-all layer" in text   # every rolesim thread is taken by a group


def test_jupyterlab_is_pinned_and_installed():
    """`make notebook` opens the notebooks in JupyterLab from .venv: pinned in requirements.lock."""
    import importlib.metadata

    root = Path(__file__).resolve().parents[1]
    pins = dict(line.split("==") for line in (root / "requirements.lock").read_text().split() if "==" in line)
    assert importlib.metadata.version("jupyterlab") == pins["jupyterlab"]
    assert "jupyter lab --notebook-dir=notebooks" in (root / "Makefile").read_text()
