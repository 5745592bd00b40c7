"""Reading and writing profile TOML: determinism, line numbers, strict schema errors."""

from __future__ import annotations

from tests.datafiles import line_of, profile_diagnostics
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.schema import Profile
from threadwise.synthesize.writer import dumps


def test_write_is_deterministic_and_round_trips(example: Profile, example_text: str) -> None:
    assert dumps(example) == example_text
    again, _ = parse_profile(example_text)
    assert again == example
    assert dumps(again) == example_text


def test_evidence_and_sizing_arithmetic_are_comments(example_text: str) -> None:
    assert "# evidence: 2 threads (worker-0, worker-1), 1.94 CPUs busy" in example_text
    assert ("# sizing: request 2250m x cpu_fraction 0.85 = 1912.5m -> 2 exclusive cores"
            in example_text)
    assert 'comment = "cpu_fraction 0.85, not 0.90: 2250m x 0.90 rounds up to 3 cores' \
        in example_text


def test_bad_toml_reports_line_and_column() -> None:
    [diag] = profile_diagnostics('schema_version = 1\nname = "x"\n[workload]\nprocess = demo\n')
    assert (diag.rule, diag.line, diag.column) == ("toml_syntax", 4, 11)
    assert diag.render().startswith("p.toml:4:11: error[toml_syntax]: invalid TOML")


def test_unknown_key_names_its_line_and_the_allowed_keys(example_text: str) -> None:
    text = example_text.replace("hot_threads = 2", "hot_thread = 2")
    [diag] = profile_diagnostics(text)
    assert diag.message == "unknown key 'group[0].hot_thread'"
    assert diag.line == line_of(text, "hot_thread = 2")
    assert "hot_threads" in (diag.hint or "")


def test_unknown_top_level_table(example_text: str) -> None:
    text = example_text + "\n[extras]\nx = 1\n"
    [diag] = profile_diagnostics(text)
    assert diag.message == "unknown key 'extras'"
    assert diag.line == line_of(text, "[extras]")


def test_non_finite_float_is_an_error(example_text: str) -> None:
    text = example_text.replace("cpu_fraction = 0.85", "cpu_fraction = inf")
    [diag] = profile_diagnostics(text)
    assert diag.message == "group[0].cpu_fraction: nan and inf are not allowed"
    assert diag.line == line_of(text, "cpu_fraction = inf")


def test_wrong_type_is_an_error(example_text: str) -> None:
    text = example_text.replace("hot_threads = 2", 'hot_threads = "2"')
    [diag] = profile_diagnostics(text)
    assert diag.message.startswith("group[0].hot_threads: input should be a valid integer")


def test_empty_group_is_an_error(example_text: str) -> None:
    text = example_text.replace('match = ["worker-*"]', "match = []")
    [diag] = profile_diagnostics(text)
    assert diag.message == "group[0].match: a group needs at least one match pattern"
    assert diag.line == line_of(text, "match = []")


def test_missing_key_points_at_its_table(example_text: str) -> None:
    text = example_text.replace('treatment = "latency"\n', "")
    [diag] = profile_diagnostics(text)
    assert diag.message == "missing required key 'group[1].treatment'"
    headers = [n for n, line in enumerate(text.splitlines(), 1) if line == "[[group]]"]
    assert diag.line == headers[1]


def test_unknown_schema_version() -> None:
    [diag] = profile_diagnostics('schema_version = 7\nname = "x"\n')
    assert (diag.rule, diag.line) == ("schema_version", 1)
    assert "7" in diag.message


def test_source_map_finds_nested_paths() -> None:
    text = (
        'a = 1\n[[group]]\nname = "x"\nmatch = [\n  "p",  # c\n  "q",\n]\n'
        '[group.evidence]\nnames = ["n"]\n[[group]]\nname = "y"\nt = { k = 1, "j.k" = 2 }\n'
    )
    source = SourceMap(text)
    assert source.line_of(("group", 0, "match", 1)) == 6
    assert source.line_of(("group", 0, "evidence", "names", 0)) == 9
    assert source.line_of(("group", 1, "name")) == 11
    assert source.line_of(("group", 1, "t", "j.k")) == 12
    assert source.line_of(("group", 1, "missing")) == 10
    assert source.line_of(()) is None
