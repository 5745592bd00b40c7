"""A profile's comments and pointers to its evidence, as a reviewer relies on them (issue 34):
derived comments that no longer match the values are warnings at their lines; the header's record
and [source]'s capture are found from a copy of the profile elsewhere."""

from __future__ import annotations

import pytest

from threadwise.errors import InputError
from threadwise.synthesize.comments import stale_comments
from threadwise.synthesize.provenance import locate, read_header, source_capture
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.schema import Evidence, Group, Profile, Source, Workload
from threadwise.synthesize.writer import dumps

HEADER = """# Trained by threadwise on 2026-11-26 01:22 UTC with:
#   threadwise train --workload rolesim --name rolesim --lab
# Evidence: artifacts/rolesim/REPORT.md (data: artifacts/rolesim/ladder.duckdb).
# The synthesized profile beat the default scheduler (wins: hot better at bg=1
# 1.17 [1.02, 1.33]).

"""


def profile(capture: str = "../build/train/rolesim/capture.duckdb") -> Profile:
    return Profile(schema_version=1, name="rolesim", workload=Workload(process="rolesim"),
                   source=Source(capture=capture), group=[
        Group(name="hot", match=["hot-*"], treatment="exclusive", hot_threads=1,
              evidence=Evidence(threads=1, names=["hot-0"])),
        Group(name="worker", match=["worker-*"], treatment="latency", slice_us=500),
        Group(name="other", match=["*"], treatment="default"),
    ])


def _warnings(text: str) -> list[tuple[int | None, str]]:
    parsed, _ = parse_profile(text)
    return [(d.line, d.message) for d in stale_comments(parsed, text, "p.toml")]


def test_a_file_as_written_has_no_stale_comment():
    assert _warnings(HEADER + dumps(profile())) == []


def test_a_treatment_changed_under_its_comment_is_a_warning_at_the_comment():
    text = dumps(profile())
    edited = text.replace('treatment = "latency"', 'treatment = "batch"')
    lines = edited.splitlines()
    at = next(i for i, line in enumerate(lines, 1) if line.startswith("# latency: "))
    found = _warnings(edited)
    assert found[0][0] == at, found
    assert found[0][1].startswith("group 'worker': the comment `latency: preempts other layers")
    assert "its values give `batch: low weight and long slices" in found[0][1]
    # the override comment still says the latency preset's slice (1000), the batch preset's is 20000
    assert any("`slice_us 1000 -> 500`" in message and "`slice_us 20000 -> 500`" in message
               for _, message in found), found


def test_sizing_comments_follow_the_sizing_and_free_comments_are_left_alone():
    text = dumps(profile()).replace("hot_threads = 1",
                                    "# reviewed: one hot thread is enough\nhot_threads = 3")
    found = _warnings(text)
    assert len(found) == 1 and "the comment `sizing: 1 hot thread x 1000m" in found[0][1], found
    assert "3 exclusive cores" in found[0][1]


def test_the_header_names_its_record_and_verdict():
    header = read_header(HEADER + dumps(profile()))
    assert header is not None and header.record == "artifacts/rolesim/ladder.duckdb"
    assert header.verdict == ("The synthesized profile beat the default scheduler (wins: hot better at bg=1 "
                              "1.17 [1.02, 1.33]).")
    assert header.line == 4
    assert read_header(dumps(profile())) is None


def test_a_copy_elsewhere_finds_the_capture_from_the_repository_root(tmp_path):
    repo = tmp_path / "repo"
    capture = repo / "build" / "train" / "rolesim" / "capture.duckdb"
    capture.parent.mkdir(parents=True)
    capture.write_bytes(b"")
    copy = tmp_path / "review" / "edited.toml"   # neither in profiles/ nor in the repository
    copy.parent.mkdir()
    # as train writes it for profiles/: relative to the profile's folder
    assert source_capture(profile(), copy, (repo,)) == capture
    # as synthesize writes it into train's work directory: beside the profile
    assert source_capture(profile("capture.duckdb"), copy, (repo,)) == capture
    # beside the profile, first
    (copy.parent / "capture.duckdb").write_bytes(b"")
    assert source_capture(profile("capture.duckdb"), copy, (repo,)) == copy.parent / "capture.duckdb"


def test_a_capture_found_nowhere_names_every_place_tried(tmp_path):
    copy = tmp_path / "edited.toml"
    with pytest.raises(InputError) as failed:
        source_capture(profile(), copy, (tmp_path / "repo",))
    message = failed.value.message
    assert ("names the capture '../build/train/rolesim/capture.duckdb' in [source], which is at none of"
            in message)
    assert str(tmp_path / "repo" / "build" / "train" / "rolesim" / "capture.duckdb") in message
    assert "THREADWISE_CAPTURE" in failed.value.hint


def test_the_record_is_found_above_the_profile(tmp_path):
    record = tmp_path / "artifacts" / "rolesim" / "ladder.duckdb"
    record.parent.mkdir(parents=True)
    record.write_bytes(b"")
    profile_path = tmp_path / "profiles" / "rolesim.toml"
    found, tried = locate("artifacts/rolesim/ladder.duckdb", profile_path, (tmp_path / "elsewhere",))
    assert found == record and tried[0] == profile_path.parent / "artifacts/rolesim/ladder.duckdb"
