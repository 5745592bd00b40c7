"""Groups selected by user (`uid = N`, scx_layered UIDEquals): synthesized from a capture whose
processes share one comm and say their roles in their titles (analyze/titles.py), written,
read back, validated, compiled, and accepted by the real scx_layered (`--print-and-exit`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analyze.test_titles import CACHE, MASTER, WORKER, service
from threadwise.analyze.contract import AnalysisRecord
from threadwise.diagnostics import ProfileError
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.overlap import find_overlaps
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Profile
from threadwise.synthesize.writer import dumps

SHAPES = ("cores=4,threads-per-core=2", "cores=2,threads-per-core=1")


def profile_of(tmp_path: Path, processes: list[tuple[int, str, int | None]]) -> tuple[Profile, str]:
    record = AnalysisRecord.of(service(tmp_path, processes))
    profile = build_profile(record, "nginx")
    text = dumps(profile)
    parsed, _ = parse_profile(text, "nginx.toml")
    assert parsed == profile
    assert [d for d in validate(parsed) if d.severity == "error"] == []
    return parsed, text


def uid_of_layer(layer: dict) -> set[int | None]:
    return {next((m["UIDEquals"] for m in block if "UIDEquals" in m), None) for block in layer["matches"]}


def test_one_group_per_role_each_selected_by_its_user(tmp_path: Path) -> None:
    profile, text = profile_of(tmp_path, [(100, MASTER, 0), (101, WORKER, 33), (102, WORKER, 33)])
    by_uid = {g.uid: g for g in profile.groups if g.uid is not None}
    assert set(by_uid) == {0, 33}
    assert by_uid[33].name == "nginx-worker" and by_uid[0].name == "nginx-master"
    assert by_uid[33].evidence.process_titles == ["worker process"]
    assert all(g.match == ["nginx"] and g.exclude == [] for g in by_uid.values())
    assert find_overlaps(profile) == []          # different users: neither takes the other's threads
    assert "uid = 33\n#   only threads running as uid 33 (UIDEquals, the effective uid); their " \
           "process title: 'worker process'" in text
    for shape in SHAPES:
        layers = compile_profile(profile, parse_shape(shape)).config.to_json_data()
        named = {layer["name"]: layer for layer in layers}
        assert uid_of_layer(named["nginx-worker"]) == {33}
        assert uid_of_layer(named["nginx-master"]) == {0}
        assert named["nginx-worker"]["matches"][0][:2] == [{"PcommPrefix": "nginx"}, {"CommPrefix": "nginx"}]


def test_titles_without_users_of_their_own_give_no_uid(tmp_path: Path) -> None:
    """One user: no uid; the roles are title groups instead (tests/synthesize/test_title_groups.py)."""
    profile, _ = profile_of(tmp_path, [(100, MASTER, 0), (101, WORKER, 0), (102, WORKER, 0)])
    assert all(g.uid is None for g in profile.groups)
    assert {tuple(g.title) for g in profile.groups if g.title} == {("nginx: master process",),
                                                                   ("nginx: worker process",)}


def test_mixed_titles_give_a_group_per_user(tmp_path: Path) -> None:
    profile, _ = profile_of(tmp_path, [(100, MASTER, 0), (101, WORKER, 33), (102, WORKER, 33),
                                       (103, CACHE, 33)])
    by_uid = {g.uid: g for g in profile.groups if g.uid is not None}
    assert set(by_uid) == {0, 33}
    assert by_uid[33].name == "nginx-cache"     # first of its sorted titles
    assert by_uid[33].evidence.process_titles == ["cache manager process", "worker process"]


def test_a_later_group_of_the_same_user_is_shadowed() -> None:
    text = """schema_version = 1
name = "t"
[workload]
process = "nginx"
[[group]]
name = "a"
match = ["nginx"]
uid = 33
treatment = "default"
[[group]]
name = "b"
match = ["nginx"]
uid = 33
treatment = "latency"
[[group]]
name = "c"
match = ["nginx"]
uid = 0
treatment = "batch"
"""
    profile, _ = parse_profile(text, "t.toml")
    assert [(o.earlier, o.later) for o in find_overlaps(profile)] == [(0, 1)]


@pytest.mark.parametrize(("value", "message"), [("-1", "greater than or equal to 0"),
                                                ("4294967296", "less than or equal to 4294967295"),
                                                ('"www-data"', "valid integer")])
def test_a_bad_uid_is_an_error_at_its_line(value: str, message: str) -> None:
    text = f'schema_version = 1\nname = "t"\n[workload]\nprocess = "nginx"\n[[group]]\nname = "a"\n' \
           f'match = ["nginx"]\nuid = {value}\ntreatment = "default"\n'
    with pytest.raises(ProfileError) as error:
        parse_profile(text, "t.toml")
    assert message in str(error.value) and "t.toml:8" in str(error.value)


@pytest.mark.scx
def test_the_real_scx_layered_accepts_groups_selected_by_user(tmp_path: Path, scx_binary: Path) -> None:
    for processes in ([(100, MASTER, 0), (101, WORKER, 33), (102, WORKER, 33)],
                      [(100, MASTER, 0), (101, WORKER, 33), (102, WORKER, 33), (103, CACHE, 33)]):
        profile, _ = profile_of(tmp_path, processes)
        for shape in SHAPES:
            compiled = compile_profile(profile, parse_shape(shape))
            assert oracle.check(compiled.config, scx_binary) == [], shape
            back = oracle.print_and_exit(compiled.config, scx_binary)
            assert {m.value for spec in back for block in spec.matches for m in block
                    if m.kind == "UIDEquals"} == {0, 33}
