"""The notebooks find their inputs after `make demo`, or say what to do (issue 21).

explore_capture reads by default the capture the demo's train step observes; review_profile
reads the profile the demo trains and the capture its `[source]` names, looked up beside the
profile, from the repository root and in train's work directory build/train/NAME. Only the
notebooks' first cells (the inputs) run here, in a copy of the notebook placed in a scratch
"repository", so the lookup from the repository root is tested without touching build/.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from benchmarks.bulk import bulk_capture
from threadwise import demo

ROOT = Path(__file__).resolve().parents[1]


def _inputs(name: str, repo: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """Run notebooks/NAME up to its first code cell inside `repo`/notebooks; the text it showed."""
    for key in ("THREADWISE_CAPTURE", "THREADWISE_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    first_code = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    nb.cells = nb.cells[:first_code + 1]
    (repo / "notebooks").mkdir(parents=True, exist_ok=True)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(repo / "notebooks")}}).execute()
    outputs = nb.cells[first_code].get("outputs", [])
    return "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """A capture and the profile synthesize wrote beside it (its [source] names the capture)."""
    work = tmp_path_factory.mktemp("inputs")
    capture = bulk_capture(work / "capture.duckdb", switches=4_000)
    profile = work / "synthesized.toml"
    done = subprocess.run([sys.executable, "-m", "threadwise.cli", "synthesize", str(capture), "-n", "demo",
                           "-o", str(profile)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return capture, profile.read_text()


def _source(text: str) -> str:
    return re.search(r'^capture = "(.*)"$', text, re.M).group(1)


def test_the_defaults_are_what_make_demo_writes():
    cells = {path.name: "".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
             for path in (ROOT / "notebooks").glob("*.ipynb")}
    assert f'Path("../{demo.CAPTURE.as_posix()}")' in cells["explore_capture.ipynb"]
    assert demo.CAPTURE.parent.name == demo.NAME   # train --name NAME works in build/train/NAME
    # the profile demo_command writes with its default --out (build/demo)
    out = demo.demo_command.__defaults__[0]
    assert f'ROOT / "{(out / "profiles" / f"{demo.NAME}.toml").as_posix()}"' in cells["review_profile.ipynb"]


def test_explore_capture_says_what_to_do_without_a_capture(tmp_path, monkeypatch):
    with pytest.raises(CellExecutionError, match="run `make demo` first") as failed:
        _inputs("explore_capture.ipynb", tmp_path, monkeypatch)
    assert str(tmp_path / demo.CAPTURE) in str(failed.value)
    with pytest.raises(CellExecutionError, match="THREADWISE_CAPTURE names a file that is not there"):
        _inputs("explore_capture.ipynb", tmp_path, monkeypatch,
                THREADWISE_CAPTURE=str(tmp_path / "gone.duckdb"))


def test_explore_capture_reads_the_demo_capture_by_default(tmp_path, trained, monkeypatch):
    capture, _ = trained
    (tmp_path / demo.CAPTURE).parent.mkdir(parents=True)
    shutil.copyfile(capture, tmp_path / demo.CAPTURE)
    assert f"../{demo.CAPTURE.as_posix()}" in _inputs("explore_capture.ipynb", tmp_path, monkeypatch)


def test_review_profile_finds_a_capture_beside_the_profile(tmp_path, trained, monkeypatch):
    capture, text = trained
    assert _source(text) == "capture.duckdb"   # synthesize writes it relative to the profile's folder
    profile = tmp_path / "elsewhere" / "demo.toml"
    profile.parent.mkdir()
    profile.write_text(text)
    shutil.copyfile(capture, profile.parent / "capture.duckdb")
    shown = _inputs("review_profile.ipynb", tmp_path, monkeypatch, THREADWISE_PROFILE=str(profile))
    assert f"capture {profile.parent / 'capture.duckdb'}" in shown
    assert "note:" not in shown   # the very capture it was trained on (capture_sha256 matches)


def test_review_profile_finds_a_trained_profiles_capture_in_trains_work_directory(tmp_path, trained,
                                                                                  monkeypatch):
    """train copies the profile out of build/train/NAME (it says `capture = "capture.duckdb"`)."""
    capture, text = trained
    profile = tmp_path / "build" / "demo" / "profiles" / "demo.toml"   # the notebook's default place
    profile.parent.mkdir(parents=True)
    profile.write_text(text.replace('name = "demo"', f'name = "{demo.NAME}"'))
    (tmp_path / "build" / "train" / demo.NAME).mkdir(parents=True)
    shutil.copyfile(capture, tmp_path / "build" / "train" / demo.NAME / "capture.duckdb")
    shown = _inputs("review_profile.ipynb", tmp_path, monkeypatch, THREADWISE_PROFILE=str(profile))
    assert f"capture ../build/train/{demo.NAME}/capture.duckdb" in shown


def test_review_profile_finds_a_capture_named_from_the_repository_root(tmp_path, trained, monkeypatch):
    capture, text = trained
    named = "build/train/older/capture.duckdb"   # how the committed profiles name theirs
    profile = tmp_path / "profiles" / "demo.toml"
    profile.parent.mkdir()
    profile.write_text(text.replace('capture = "capture.duckdb"', f'capture = "{named}"'))
    (tmp_path / named).parent.mkdir(parents=True)
    shutil.copyfile(capture, tmp_path / named)
    shown = _inputs("review_profile.ipynb", tmp_path, monkeypatch, THREADWISE_PROFILE=str(profile))
    assert f"capture ../{named}" in shown


def test_review_profile_says_where_it_looked_and_what_to_do(tmp_path, trained, monkeypatch):
    _, text = trained
    profile = tmp_path / "profiles" / "demo.toml"
    profile.parent.mkdir()
    profile.write_text(text)
    with pytest.raises(CellExecutionError) as failed:
        _inputs("review_profile.ipynb", tmp_path, monkeypatch, THREADWISE_PROFILE=str(profile))
    message = str(failed.value)
    assert "names the capture 'capture.duckdb' in [source], which is at none of" in message
    for tried in (profile.parent, tmp_path, tmp_path / "build" / "train" / "demo"):
        assert str(tried / "capture.duckdb") in message
    assert "set THREADWISE_CAPTURE" in message
    with pytest.raises(CellExecutionError, match="run `make demo` first"):
        _inputs("review_profile.ipynb", tmp_path, monkeypatch)


def test_review_profile_notes_a_capture_that_is_not_the_one_it_was_trained_on(tmp_path, trained,
                                                                             monkeypatch):
    capture, text = trained
    profile = tmp_path / "demo.toml"
    profile.write_text(text)
    other = bulk_capture(tmp_path / "other.duckdb", switches=3_000, seed=1)
    shown = _inputs("review_profile.ipynb", tmp_path, monkeypatch, THREADWISE_PROFILE=str(profile),
                    THREADWISE_CAPTURE=str(other))
    assert f"note: {other} is not byte for byte the capture" in shown
    assert f"capture {other}" in shown and str(capture) not in shown
