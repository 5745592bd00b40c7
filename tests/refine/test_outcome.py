"""No committed loser: where a training's profile goes, decided by the record's own verdict.

On copies of records: Redis's committed profile beats the default scheduler and stays a
profile; poolservice's of 2026-11-29 (tests/refine/fixtures/records/) does not, so `rejudge`
moves it out of the profiles folder into its
record as a candidate not to apply, with KEEP-DEFAULT.md's reasons per class of candidate, and
`apply` refuses that file without --ignore-verdict.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from threadwise import givenclock
from threadwise.refine import outcome, report
from threadwise.refine.measure import store
from threadwise.refine.outcome import KEEP_DEFAULT, candidate_path
from threadwise.refine.rejudge import rejudge_record
from threadwise.synthesize.provenance import KEEP_DEFAULT_MARK, says_keep_default

ROOT = Path(__file__).parents[2]


# poolservice's record of 2026-11-29 (levels 0,1,2,4, 3 repeats, budget 3: steps of three classes)
RECORDS = {"redis": ROOT / "artifacts" / "redis",
           "poolservice": ROOT / "tests" / "refine" / "fixtures" / "records" / "poolservice-2026-11-29"}


def _copy(name: str, root: Path) -> tuple[Path, Path]:
    """A scratch copy of a record, and its profile as train wrote it to profiles/: the committed
    one, or the rejected candidate without the two lines the rule put atop it."""
    record = root / "artifacts" / name
    shutil.copytree(RECORDS[name], record)
    (root / "profiles").mkdir(exist_ok=True)
    profile = root / "profiles" / f"{name}.toml"
    committed = ROOT / "profiles" / f"{name}.toml"
    if committed.is_file():
        shutil.copyfile(committed, profile)
    else:
        text = candidate_path(RECORDS[name], name).read_text()
        profile.write_text(text.removeprefix(outcome.keep_default_header()))
        (record / f"{name}.not-a-profile.toml").unlink()
        (record / "KEEP-DEFAULT.md").unlink()
    return record, profile


def test_a_win_stays_a_profile_and_a_loss_names_its_reasons_per_class(tmp_path: Path) -> None:
    for name, wins in (("redis", True), ("poolservice", False)):
        record, profile = _copy(name, tmp_path)
        con = store.open_ladder(record / "ladder.duckdb", read_only=True)
        try:
            chosen = outcome.decide(con, profile, record, name)
        finally:
            con.close()
        assert chosen.wins is wins
        assert chosen.path == (profile if wins else candidate_path(record, name))
        if not wins:
            # poolservice's record of 2026-11-29 (levels 0,1,2,4, 3 repeats, budget 3)
            assert chosen.reasons[0].startswith("the profile measured last against the default: does not win")
            assert any(r.startswith("treatment=latency (2 tried: 2 reverted)") for r in chosen.reasons)
            assert outcome.message(chosen).startswith(KEEP_DEFAULT)


def test_candidate_classes() -> None:
    assert report.candidate_class("request:treatment=latency") == "treatment=latency"
    assert report.candidate_class("hot:slice_us=4000") == "slice_us"
    assert report.candidate_class("join:redis-server>io_thd") == "join"
    assert report.candidate_class("hot:preemptible") == "preemptible"
    assert report.candidate_class("start") == "start"


def test_the_mark_is_read_from_the_header_only() -> None:
    assert says_keep_default(f"# NOT A PROFILE\n{KEEP_DEFAULT_MARK}\nschema_version = 1\n")
    assert not says_keep_default(f"schema_version = 1\n{KEEP_DEFAULT_MARK}\n")
    assert not says_keep_default("# Trained by threadwise\nschema_version = 1\n")


def test_rejudge_retires_a_losing_profile_and_apply_refuses_it(tmp_path: Path) -> None:
    record, profile = _copy("poolservice", tmp_path)
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "rejudge", str(record), "--profile",
                           str(profile)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    moved = candidate_path(record, "poolservice")
    assert not profile.exists() and moved.is_file()
    assert f"moved to {moved}" in done.stdout
    text = moved.read_text()
    assert text.startswith("# NOT A PROFILE TO APPLY") and says_keep_default(text)
    assert "# Trained by threadwise" in text and "[[group]]" in text
    assert "treatment=latency (2 tried: 2 reverted)" in (record / "KEEP-DEFAULT.md").read_text()
    assert "**Keep the default scheduler for this service.**" in (record / "REPORT.md").read_text()
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        assert con.execute("SELECT profile_path FROM training").fetchone() == (str(moved),)
    finally:
        con.close()
    again = givenclock.run([sys.executable, "-m", "threadwise.cli", "rejudge", str(record)],
                           capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert says_keep_default(moved.read_text())  # a second rejudge keeps the mark
    refused = givenclock.run([sys.executable, "-m", "threadwise.cli", "apply", str(moved)],
                             capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2
    assert "keep the default scheduler for this service" in refused.stderr
    assert "--ignore-verdict" in refused.stderr


def test_rejudge_of_a_bare_ladder_gives_no_training_verdict(tmp_path: Path) -> None:
    """`threadwise ladder`'s file has cells and comparisons but no training steps: rejudge judges its
    runs again and says there is no trained profile to give a verdict on (it once printed "The
    synthesized profile did not beat the default scheduler (not measured)")."""
    ladder = tmp_path / "ladder.duckdb"
    shutil.copyfile(RECORDS["poolservice"] / "ladder.duckdb", ladder)
    con = store.open_ladder(ladder)
    try:
        con.execute("DELETE FROM step")
        con.execute("DELETE FROM training")
    finally:
        con.close()
    lines = rejudge_record(ladder)
    assert lines[0].startswith("rejudge: ") and "runs judged again" in lines[0]
    assert "no verdict of a trained profile" in lines[-1]
    assert not any("default scheduler" in line for line in lines)
