"""Groups selected by process title (`title = ["postgres: checkpointer"]`): synthesized from a
capture whose processes share one comm and one user, validated like any pattern, compiled to
HintEquals layers ahead of the rest with a hinted default layer and `--task-hint-map`, understood
by lint and diff, and accepted by the real scx_layered (`--print-and-exit`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analyze.test_titles import postgres
from threadwise.analyze.contract import AnalysisRecord
from threadwise.diagnostics import ProfileError
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compile import HINT_DEFAULT_VALUE, TASK_HINT_MAP, compile_profile
from threadwise.synthesize.diff_threads import Thread, layer_of, place_threads
from threadwise.synthesize.layers import views_from_profile
from threadwise.synthesize.lint import overlaps
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.writer import dumps

SHAPE = parse_shape("cores=2,threads-per-core=1")
HEAD = 'schema_version = 1\nname = "pg"\n[workload]\nprocess = "postgres"\n'


def group(name: str, body: str, treatment: str = "default") -> str:
    return f'[[group]]\nname = "{name}"\n{body}\ntreatment = "{treatment}"\n'


PROFILE = HEAD + group("ckpt", 'title = ["postgres: checkpointer"]', "housekeeping") \
    + group("postgres", 'match = ["postgres"]') \
    + group("wal", 'title = ["postgres: walwriter", "postgres: background writer"]', "latency")


def errors(text: str) -> list[str]:
    profile, _ = parse_profile(text, "pg.toml")
    return [f"{d.rule}: {d.message}" for d in validate(profile) if d.severity == "error"]


def test_compile_puts_title_groups_first_with_their_hints_and_the_default() -> None:
    profile, _ = parse_profile(PROFILE, "pg.toml")
    compiled = compile_profile(profile, SHAPE)
    layers = json.loads(compiled.to_json())
    assert [(layer["name"], layer["matches"]) for layer in layers] == [
        ("ckpt", [[{"HintEquals": 1}]]), ("wal", [[{"HintEquals": 2}]]),
        ("untitled", [[{"HintEquals": HINT_DEFAULT_VALUE}]]),
        ("postgres", [[{"PcommPrefix": "postgres"}, {"CommPrefix": "postgres"}]]), ("rest", [[]])]
    assert compiled.hints == {"postgres: checkpointer": 1, "postgres: walwriter": 2,
                              "postgres: background writer": 2}
    assert compiled.default_hint == HINT_DEFAULT_VALUE
    assert compiled.scx_args[-2:] == ("--task-hint-map", TASK_HINT_MAP)
    assert layers[2]["kind"] == layers[-1]["kind"]   # moved back: scheduled as the catch-all


def test_a_profile_without_title_groups_compiles_as_before() -> None:
    profile, _ = parse_profile(HEAD + group("postgres", 'match = ["postgres"]'), "pg.toml")
    compiled = compile_profile(profile, SHAPE)
    assert compiled.hints == {} and "--task-hint-map" not in compiled.scx_args
    assert [spec.name for spec in compiled.config] == ["postgres", "rest"]


@pytest.mark.parametrize(("body", "message"), [
    ('title = ["postgres: checkpointer"]\nmatch = ["postgres"]', "takes no match"),
    ('title = ["postgres: checkpointer"]\nuid = 110', "takes no uid"),
    ('title = []', "at least one match pattern"),
])
def test_a_title_group_with_other_matchers_is_a_schema_error(body: str, message: str) -> None:
    with pytest.raises(ProfileError) as error:
        parse_profile(HEAD + group("a", body), "pg.toml")
    assert message in str(error.value)


@pytest.mark.parametrize(("pattern", "rule"), [
    ("postgres: check*", "title_pattern"), ("checkpointer", "title_pattern"),
    ("postgres:  checkpointer", "title_pattern"), ("postgres: wal\twriter", "control_char"),
    ("a b: c", "title_pattern"),
])
def test_a_bad_title_pattern_is_an_error(pattern: str, rule: str) -> None:
    found = errors(HEAD + group("a", f"title = [{json.dumps(pattern)}]"))
    assert found and found[0].startswith(rule + ":")


def test_a_title_an_earlier_one_selects_is_an_overlap() -> None:
    found = errors(HEAD + group("a", 'title = ["postgres: bench"]')
                   + group("b", 'title = ["postgres: bench bench"]'))
    assert found == ["overlap: group 'b' title 'postgres: bench bench' can never match: group 'a' "
                     "comes first and its title 'postgres: bench' selects it"]
    assert errors(HEAD + group("a", 'title = ["postgres: bench"]')
                  + group("b", 'title = ["postgres: benchmark"]')) == []


def test_the_hinted_default_layer_name_is_reserved() -> None:
    assert any(e.startswith("reserved_name") for e in errors(HEAD + group("untitled", 'match = ["x"]')))


def test_lint_hinted_layers_take_no_thread_by_name() -> None:
    profile, _ = parse_profile(PROFILE, "pg.toml")
    views = views_from_profile(profile, SHAPE)
    assert [v.name for v in views] == ["ckpt", "wal", "untitled", "postgres", "rest"]
    assert not views[0].matches("postgres", "postgres") and views[3].matches("postgres", "postgres")
    assert overlaps(views) == []


def test_diff_places_processes_by_title() -> None:
    old, _ = parse_profile(HEAD + group("postgres", 'match = ["postgres"]'), "old.toml")
    new, _ = parse_profile(PROFILE, "new.toml")
    ckpt = Thread("postgres", "postgres", None, "postgres: checkpointer")
    master = Thread("postgres", "postgres", None, "/usr/lib/postgresql/15/bin/postgres -D x")
    assert layer_of(new, ckpt.name, ckpt.title).name == "ckpt"
    assert layer_of(new, master.name, master.title).name == "postgres"
    placed = place_threads(old, new, {"postgres": "postgres"}, {}, [ckpt, master])
    assert [(m.thread, m.new) for m in placed.moves] == [("postgres", ("ckpt", " (housekeeping)"))] or \
        len(placed.moves) == 1


def synthesized(tmp_path: Path):
    profile = build_profile(AnalysisRecord.of(postgres(tmp_path)), "pg")
    parsed, _ = parse_profile(dumps(profile), "pg.toml")
    assert parsed == profile
    assert [d for d in validate(parsed) if d.severity == "error"] == []
    return parsed


def test_a_postgres_capture_synthesizes_title_groups(tmp_path: Path) -> None:
    profile = synthesized(tmp_path)
    titled = {g.name: g.title for g in profile.groups if g.title}
    assert titled["postgres-checkpointer"] == ["postgres: checkpointer"]
    assert titled["postgres-walwriter"] == ["postgres: walwriter"]
    assert titled["postgres-bench-bench"] == ["postgres: bench bench"]
    assert len(profile.groups) >= 3
    assert 'title = ["postgres: checkpointer"]' in dumps(profile)


@pytest.mark.scx
def test_the_real_scx_layered_accepts_title_groups(tmp_path: Path, scx_binary: Path) -> None:
    for profile in (parse_profile(PROFILE, "pg.toml")[0], synthesized(tmp_path)):
        compiled = compile_profile(profile, SHAPE)
        assert oracle.check(compiled.config, scx_binary, args=compiled.scx_args) == []
        back = oracle.print_and_exit(compiled.config, scx_binary, args=compiled.scx_args)
        hints = [m.value for spec in back for block in spec.matches for m in block if m.kind == "HintEquals"]
        assert sorted(hints) == sorted({*compiled.hints.values(), HINT_DEFAULT_VALUE})
