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
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from tests.kernels import execute
from tests.synthetic.bulk import bulk_capture
from threadwise import demo, givenclock

ROOT = Path(__file__).resolve().parents[1]


def _first_cell(name: str, repo: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *,
                allow_errors: bool = False) -> list[dict]:
    """Run notebooks/NAME up to its first code cell inside `repo`/notebooks, with only `env` of the
    notebooks' variables set; that cell's outputs."""
    for key in ("THREADWISE_CAPTURE", "THREADWISE_PROFILE", "THREADWISE_LADDER", "THREADWISE_LADDER_RUN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    first_code = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    nb.cells = nb.cells[:first_code + 1]
    (repo / "notebooks").mkdir(parents=True, exist_ok=True)
    execute(nb, repo / "notebooks", timeout=120, allow_errors=allow_errors)
    return nb.cells[first_code].get("outputs", [])


def _inputs(name: str, repo: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """Run notebooks/NAME up to its first code cell inside `repo`/notebooks; the text it showed."""
    outputs = _first_cell(name, repo, monkeypatch, env)
    return "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """A capture and the profile synthesize wrote beside it (its [source] names the capture)."""
    work = tmp_path_factory.mktemp("inputs")
    capture = bulk_capture(work / "capture.duckdb", switches=4_000)
    profile = work / "synthesized.toml"
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "synthesize", str(capture), "-n", "demo",
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
    # the profile the demo writes with its default --out (build/demo)
    out = demo.OUT
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


# --- issue 34: bad inputs stop with one line; the review finds and checks its capture as lint does ---


def _one_line_error(name: str, repo: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """The error the first code cell of notebooks/NAME stops with, checked to be one line."""
    outputs = _first_cell(name, repo, monkeypatch, env, allow_errors=True)
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert errors, "the notebook did not stop"
    shown = [line for line in re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0]["traceback"])).splitlines()
             if line.strip()]
    assert len(shown) == 1, shown   # no traceback: what is wrong and what to do
    return shown[0]


LADDER = ROOT / "artifacts" / "rolesim" / "ladder.duckdb"


def test_compare_ladder_stops_on_a_bad_run_or_file_with_one_line(tmp_path, trained, monkeypatch):
    from threadwise.refine.measure import store

    ladder = tmp_path / "ladder.duckdb"   # the committed record at this threadwise's ladder schema
    shutil.copyfile(LADDER, ladder)
    store.open_ladder(ladder).close()
    line = _one_line_error("compare_ladder.ipynb", tmp_path, monkeypatch, THREADWISE_LADDER=str(ladder),
                           THREADWISE_LADDER_RUN="9")
    assert line.startswith("UsageError: THREADWISE_LADDER_RUN='9': ")
    assert "has no such run; give one of 1, " in line
    assert "or unset it for the last run" in line
    line = _one_line_error("compare_ladder.ipynb", tmp_path, monkeypatch, THREADWISE_LADDER=str(ladder),
                           THREADWISE_LADDER_RUN="last")
    assert "THREADWISE_LADDER_RUN='last'" in line
    line = _one_line_error("compare_ladder.ipynb", tmp_path, monkeypatch,
                           THREADWISE_LADDER=str(tmp_path / "gone.duckdb"))
    assert "THREADWISE_LADDER: " in line and "no such ladder file" in line
    capture, _ = trained
    line = _one_line_error("compare_ladder.ipynb", tmp_path, monkeypatch, THREADWISE_LADDER=str(capture))
    assert "not a ladder file" in line and "is this a capture?" in line


def test_explore_capture_stops_on_a_file_that_is_not_a_capture_with_one_line(tmp_path, monkeypatch):
    line = _one_line_error("explore_capture.ipynb", tmp_path, monkeypatch, THREADWISE_CAPTURE=str(LADDER))
    assert line.startswith("UsageError: THREADWISE_CAPTURE: ") and "not a threadwise capture" in line


def test_review_profile_finds_the_capture_of_a_copy_outside_the_repository(tmp_path, trained, monkeypatch):
    """A reviewer's copy of a committed profile (its [source] says ../build/train/NAME/capture.duckdb,
    relative to profiles/) finds the capture train left in the repository's build/train/NAME."""
    capture, text = trained
    repo = tmp_path / "repo"
    (repo / "build" / "train" / "demo").mkdir(parents=True)
    shutil.copyfile(capture, repo / "build" / "train" / "demo" / "capture.duckdb")
    copy = tmp_path / "review" / "edited.toml"
    copy.parent.mkdir()
    copy.write_text(text.replace('capture = "capture.duckdb"',
                                 'capture = "../build/train/demo/capture.duckdb"'))
    shown = _inputs("review_profile.ipynb", repo, monkeypatch, THREADWISE_PROFILE=str(copy))
    assert "capture ../build/train/demo/capture.duckdb" in shown


def test_review_profile_refuses_another_workloads_capture_as_lint_does(tmp_path, trained, monkeypatch):
    capture, text = trained
    process = re.search(r'^process = "(.*)"$', text, re.M).group(1)
    other = tmp_path / "redis.toml"
    other.write_text(text.replace(f'process = "{process}"', 'process = "redis-server"'))
    line = _one_line_error("review_profile.ipynb", tmp_path, monkeypatch, THREADWISE_PROFILE=str(other),
                           THREADWISE_CAPTURE=str(capture))
    assert f"{capture} is not a capture of this profile's workload: its target process is '{process}', " \
           "the profile's is 'redis-server'" in line
    assert "or unset THREADWISE_CAPTURE" in line
