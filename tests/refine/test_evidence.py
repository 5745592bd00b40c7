"""`validate` and `diff` tie a trained profile to its record (issue 34): identical to a measured arm
(with that arm's stored verdicts), or not measured, in which case the header's verdict does not
apply; found from the header the way [source]'s capture is found."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from threadwise import givenclock
from threadwise.refine import report
from threadwise.refine.evidence import record_note
from threadwise.refine.measure import store
from threadwise.synthesize.provenance import NOT_THE_HEADERS, read_header
from threadwise.synthesize.reader import load_profile, parse_profile
from threadwise.words import plain

ROOT = Path(__file__).resolve().parents[2]
OLD_ROLESIM = ROOT / "tests" / "refine" / "fixtures" / "records" / "rolesim-2026-11-26"


def tw(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=cwd)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A scratch repository holding rolesim's record of 2026-11-26 (its final profile, refined by two
    kept steps, and the ladder file: tests/refine/fixtures/records/), the record brought
    to this threadwise's ladder schema (opened writable once, as `threadwise rejudge` would)."""
    root = tmp_path_factory.mktemp("repo")
    (root / "profiles").mkdir()
    (root / "artifacts" / "rolesim").mkdir(parents=True)
    shutil.copyfile(OLD_ROLESIM / "rolesim.not-a-profile.toml", root / "profiles" / "rolesim.toml")
    record = root / "artifacts" / "rolesim" / "ladder.duckdb"
    shutil.copyfile(OLD_ROLESIM / "ladder.duckdb", record)
    store.open_ladder(record).close()
    return root


@pytest.fixture(scope="module")
def final(repo) -> tuple[int, str]:
    con = store.open_ladder(repo / "artifacts" / "rolesim" / "ladder.duckdb", read_only=True)
    try:
        found = report.best_measurement(con)
    finally:
        con.close()
    assert found is not None
    return found


def _note(path: Path, roots: tuple[Path, ...]) -> tuple[bool | None, str]:
    profile, _ = load_profile(path)
    note = record_note(path, profile, roots=roots)
    assert note is not None
    return note.applies, plain(note.sentence)


def test_the_committed_profile_is_its_records_final_profile(repo, final):
    run_id, arm = final
    applies, text = _note(repo / "profiles" / "rolesim.toml", (repo,))
    assert applies is True, text
    assert text.startswith(f"identical to {arm} of run {run_id} ")
    assert "the record's final profile; its stored verdicts against the default scheduler: " in text
    assert "hot_chunks_per_s " in text and "worker_lat_p99_us " in text   # primary, then secondary


def test_an_edited_profile_was_not_measured(repo, tmp_path):
    edited = tmp_path / "rolesim.toml"
    edited.write_text((repo / "profiles" / "rolesim.toml").read_text().replace("hot_threads = 1",
                                                                              "hot_threads = 4"))
    applies, text = _note(edited, (repo,))
    assert applies is False
    assert text.startswith("not measured: it differs from every profile arm in ")
    assert "which differs in hot: hot_threads" in text and text.endswith(NOT_THE_HEADERS)


def test_a_reverted_candidate_is_named_but_the_verdict_is_not_its(repo, tmp_path):
    con = store.open_ladder(repo / "artifacts" / "rolesim" / "ladder.duckdb", read_only=True)
    try:
        run_id, text = con.execute("SELECT run_id, profile_toml FROM arm WHERE arm = 'candidate' "
                                   "ORDER BY run_id LIMIT 1").fetchone()
    finally:
        con.close()
    header = (repo / "profiles" / "rolesim.toml").read_text().split("\n\n", 1)[0]
    candidate = tmp_path / "candidate.toml"
    candidate.write_text(f"{header}\n\n{text}")
    parse_profile(candidate.read_text())
    applies, said = _note(candidate, (repo,))
    assert applies is False
    assert said.startswith(f"identical to candidate of run {run_id} ")
    assert said.endswith(f"not the record's final profile, so {NOT_THE_HEADERS}")


def test_a_record_that_is_not_there_or_cannot_be_read_is_said_so(repo, tmp_path):
    copy = tmp_path / "rolesim.toml"
    copy.write_text((repo / "profiles" / "rolesim.toml").read_text())
    applies, text = _note(copy, (tmp_path,))
    assert applies is None
    assert "names the record artifacts/rolesim/ladder.duckdb, which is at none of" in text
    assert "its verdict cannot be checked here" in text
    newer = tmp_path / "artifacts" / "rolesim" / "ladder.duckdb"   # written by a newer threadwise
    newer.parent.mkdir(parents=True)
    shutil.copyfile(repo / "artifacts" / "rolesim" / "ladder.duckdb", newer)
    con = duckdb.connect(str(newer))
    con.execute("UPDATE ladder_meta SET schema_version = 99")
    con.close()
    applies, text = _note(copy, (tmp_path,))
    assert applies is None and "cannot be read here: ladder schema version 99" in text, text


def test_validate_warns_on_a_stale_verdict_and_comment_and_says_what_was_measured(repo, tmp_path):
    profile = repo / "profiles" / "rolesim.toml"
    edited = tmp_path / "rolesim.toml"
    edited.write_text(profile.read_text().replace('treatment = "latency"', 'treatment = "batch"', 1))
    done = tw("validate", str(edited), cwd=repo)
    assert done.returncode == 0, done.stderr
    header = read_header(edited.read_text())
    assert f"{edited}:{header.line}: warning[stale_verdict]: {NOT_THE_HEADERS}" in done.stderr
    assert "warning[stale_comment]: group 'worker': the comment `latency: preempts" in done.stderr
    assert f"{edited}: evidence: not measured: it differs from every profile arm in " in done.stdout
    assert "(5 groups, 2 warnings)" in done.stdout
    report_json = json.loads(tw("validate", str(edited), "--json", cwd=repo).stdout)
    assert report_json["evidence"]["applies"] is False
    assert {p["rule"] for p in report_json["problems"]} == {"stale_verdict", "stale_comment"}
    same = tw("validate", "profiles/rolesim.toml", cwd=repo)
    assert same.returncode == 0 and "warning" not in same.stderr, same.stderr
    assert "evidence: identical to " in same.stdout and "(5 groups, 0 warnings)" in same.stdout


def test_diff_names_what_each_profile_is_in_the_record(repo, tmp_path, final):
    run_id, arm = final
    edited = tmp_path / "rolesim.toml"
    edited.write_text((repo / "profiles" / "rolesim.toml").read_text().replace("hot_threads = 1",
                                                                              "hot_threads = 4"))
    done = tw("diff", "profiles/rolesim.toml", str(edited), "--format", "markdown", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "**Evidence** (the training records):" in done.stdout
    assert f"- old `profiles/rolesim.toml`: identical to `{arm}` of run {run_id} " in done.stdout
    assert f"- new `{edited}`: not measured: " in done.stdout
