"""Groups selected by process title (`title = ["postgres: checkpointer"]`): synthesized from a
capture whose processes share one comm and one user, validated like any pattern, compiled to
HintEquals layers ahead of the rest with a hinted default layer and `--task-hint-map`, understood
by lint and diff, and accepted by the real scx_layered (`--print-and-exit`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analyze.test_titles import MS, PG_ROLES, POSTMASTER, T0, postgres
from tests.synthesize.test_cli import tw
from threadwise.analyze import analyze_capture
from threadwise.analyze.contract import AnalysisRecord
from threadwise.diagnostics import ProfileError
from threadwise.observe.builder import CaptureBuilder
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compile import HINT_DEFAULT_VALUE, TASK_HINT_MAP, compile_profile
from threadwise.synthesize.diff_threads import Thread, layer_of, place_threads
from threadwise.synthesize.layers import views_from_profile
from threadwise.synthesize.lint import CaptureFacts, ThreadFact, lint, overlaps
from threadwise.synthesize.lint_capture import capture_facts
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


BACKEND = "postgres: bench bench 127.0.0.1({port}) {state}"


def busy_postgres(tmp_path: Path) -> Path:
    """The synthetic PostgreSQL of tests/analyze/test_titles.py with every process busy (15% of a
    CPU, over lint's busy share): the postmaster (untitled), the auxiliary processes (titled in
    their cmdline only) and four backends whose titles the capture recorded over time."""
    processes = [(200, POSTMASTER)] + [(201 + i, t) for i, t in enumerate(PG_ROLES)] \
        + [(210 + i, BACKEND.format(port=40000 + i, state="idle")) for i in range(4)]
    cap = CaptureBuilder(target_tgids=[pid for pid, _ in processes], duration_ns=2 * T0,
                         nr_cpus=len(processes))   # a CPU each: slices of one CPU may not overlap
    for i in range(4):
        for k, state in enumerate(("authentication", "idle", "UPDATE")):
            cap.title(T0 + k * 100 * MS, 210 + i, BACKEND.format(port=40000 + i, state=state))
    for index, (pid, cmdline) in enumerate(processes):
        cap.thread(pid, pid, "postgres")
        cap.process_identity(pid, cmdline=cmdline, euid=110, egid=110)
        for k in range(200):
            cap.slice(pid, index, T0 + k * 5 * MS, 1_500_000)
    return cap.write(tmp_path / "pg.duckdb")


def test_lint_places_a_capture_s_threads_in_their_title_groups(tmp_path: Path) -> None:
    """Each process's last title (process_title, else its cmdline) puts its thread in the title
    group that selects it, ahead of the comm group `*`; the postmaster has no title group."""
    path = busy_postgres(tmp_path)
    profile = build_profile(AnalysisRecord.of(analyze_capture(path)), "pg")
    facts = capture_facts(path)
    titles = {t.title for t in facts.threads}
    assert BACKEND.format(port=40000, state="UPDATE") in titles and "postgres: checkpointer " in titles
    assert POSTMASTER in titles
    views = views_from_profile(profile, SHAPE)
    from threadwise.synthesize.lint import _first_layer
    placed = sorted((t.title, views[_first_layer(views, t)].name) for t in facts.threads)
    assert ("postgres: checkpointer ", "postgres-checkpointer") in placed
    assert (BACKEND.format(port=40003, state="UPDATE"), "postgres-bench-bench") in placed
    assert (POSTMASTER, "other") in placed
    assert [f for f in lint(views, SHAPE, facts) if f.lint == "uncovered"] == []


def test_lint_capture_reports_no_title_group_thread_uncovered(tmp_path: Path) -> None:
    """Without the comm group `*`, `lint --capture` reports the two busy processes no group
    takes: the postmaster (untitled) and the autovacuum launcher (compact folded its title group
    into `*`); none of the eight the title groups take (it used to report all ten)."""
    path = busy_postgres(tmp_path)
    profile = build_profile(AnalysisRecord.of(analyze_capture(path)), "pg")
    titled = profile.model_copy(update={"groups": [g for g in profile.groups if g.title]})
    assert len(titled.groups) == len(profile.groups) - 1
    assert sum(len(g.title) for g in titled.groups) == 5   # bench bench and four auxiliaries
    assert not any("postgres: autovacuum launcher" in g.title for g in titled.groups)
    (tmp_path / "pg.toml").write_text(dumps(titled))
    done = tw("lint", "pg.toml", "--shape", "cores=4,threads-per-core=1", "--capture", "pg.duckdb",
              "--json", cwd=tmp_path)
    assert done.returncode == 7, done.stderr
    found = json.loads(done.stdout)["findings"]
    assert [(f["lint"], f["threads"]) for f in found] == [("uncovered", ["postgres", "postgres"])]
    assert found[0]["message"].startswith("2 busy threads of the workload match no group")


def test_lint_sees_title_group_threads_collide_on_siblings() -> None:
    """The observed SMT check places two checkpointer-titled threads in their exclusive hinted
    layer; a thread without a title stays in the comm group."""
    profile, _ = parse_profile(HEAD + group("ckpt", 'title = ["postgres: checkpointer"]', "exclusive")
                               + group("postgres", 'match = ["postgres"]'), "pg.toml")
    shape = parse_shape("cores=4,threads-per-core=2")
    threads = [ThreadFact(1, "postgres", "postgres", 0.2, title="postgres: checkpointer "),
               ThreadFact(2, "postgres", "postgres", 0.2, title="postgres: checkpointer"),
               ThreadFact(3, "postgres", "postgres", 0.2)]
    facts = CaptureFacts(1000 * MS, threads, corun={(1, 2): 100 * MS, (1, 3): 100 * MS})
    observed = [f for f in lint(views_from_profile(profile, shape), shape, facts)
                if f.message.startswith("observed")]
    assert [(f.lint, f.layers) for f in observed] == [("smt_collision", ("ckpt",))]
