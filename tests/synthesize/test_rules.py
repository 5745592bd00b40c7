"""One negative test per validation rule, with its message, line and hint checked."""

from __future__ import annotations

from typing import Any

import pytest

from threadwise.diagnostics import Diagnostic
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Evidence, Group, Profile, Workload
from threadwise.synthesize.writer import dumps


def group(name: str, *match: str, **extra: Any) -> Group:
    extra.setdefault("treatment", "default")
    return Group(name=name, match=list(match), **extra)


def profile(*groups: Group, process: str = "svc") -> Profile:
    return Profile(schema_version=1, name="t", workload=Workload(process=process),
                   group=list(groups))


def check(p: Profile) -> tuple[list[Diagnostic], list[str]]:
    """Validate through the TOML text, so line numbers are real."""
    text = dumps(p)
    parsed, source = parse_profile(text, "t.toml")
    return validate(parsed, source, "t.toml"), text.splitlines()


def only(diags: list[Diagnostic], rule: str) -> Diagnostic:
    [found] = [d for d in diags if d.rule == rule]
    return found


def test_valid_example_has_no_problems(example: Profile) -> None:
    assert check(example)[0] == []


def test_suffix_pattern() -> None:
    p = profile(group("w", "*-worker", evidence=Evidence(names=["a-worker", "ab-worker"])))
    diags, lines = check(p)
    diag = only(diags, "suffix_pattern")
    assert diag.message == ("group 'w': pattern '*-worker' matches by suffix or substring; "
                            "scx_layered matches comm by prefix only")
    assert diag.hint == "threads seen: a-worker, ab-worker; their common prefix is 'a'"
    assert lines[diag.line - 1] == 'match = ["*-worker"]'
    assert diag.severity == "error"


def test_glob_pattern() -> None:
    diag = only(check(profile(group("w", "io_?_thd")))[0], "glob_pattern")
    assert "only a trailing '*' (a prefix) is allowed" in diag.message


def test_match_all() -> None:
    # `*` alone is the workload's catch-all only as the single pattern of the LAST group
    for bad in (profile(group("w", "*"), group("x", "x")), profile(group("w", "w", "*"))):
        diag = only(check(bad)[0], "match_all")
        assert diag.message == "group 'w': pattern '*' matches every thread"
        assert "only the last group" in diag.hint


def test_workload_catch_all_is_the_last_group() -> None:
    from threadwise.shape import parse_shape
    from threadwise.synthesize.compile import compile_profile

    p = profile(group("x", "x*"), group("other", "*"))
    assert check(p)[0] == []
    layers = compile_profile(p, parse_shape("cores=2,threads-per-core=1")).config.to_json_data()
    assert [layer["name"] for layer in layers] == ["x", "other", "rest"]
    assert layers[1]["matches"] == [[{"PcommPrefix": "svc"}]]


def test_prefix_too_long() -> None:
    diag = only(check(profile(group("w", "averyveryverylongname*")))[0], "prefix_too_long")
    assert diag.message == ("group 'w': prefix 'averyveryverylongname' is 21 bytes; the kernel "
                            "keeps 15 bytes of a comm, so it can never match")
    assert diag.hint == "use at most the first 15 bytes: 'averyveryverylo'"


def test_prefix_length_counts_utf8_bytes() -> None:
    diag = only(check(profile(group("w", "zähler-größe-x")))[0], "prefix_too_long")
    assert "is 17 bytes" in diag.message


def test_process_prefix_too_long() -> None:
    diag = only(check(profile(group("w", "a"), process="a-very-long-process-name"))[0],
                "prefix_too_long")
    assert diag.message.startswith("workload.process: prefix 'a-very-long-process-name'")
    assert diag.path == ("workload", "process")


def test_control_char() -> None:
    diag = only(check(profile(group("w", "a\x00b")))[0], "control_char")
    assert "control character" in diag.message


def test_too_many_layers() -> None:
    p = profile(*(group(f"g{i}", f"p{i}-") for i in range(16)))
    diags, lines = check(p)
    diag = only(diags, "too_many_layers")
    assert diag.message == ("16 groups and the catch-all make 17 layers; scx_layered 1.1.4 "
                            "allows at most 16")
    assert lines[diag.line - 1] == "[[group]]"


def test_too_many_patterns() -> None:
    diag = only(check(profile(group("w", *(f"p{i}" for i in range(33)))))[0],
                "too_many_patterns")
    assert diag.message == "group 'w' has 33 patterns; a layer takes at most 32 OR blocks"


def test_too_many_excludes() -> None:
    p = profile(group("w", "p", exclude=[f"p{i}" for i in range(25)]))
    diag = only(check(p)[0], "too_many_excludes")
    assert diag.message.startswith("group 'w' needs 27 matches in one AND block")


def test_reserved_and_duplicate_names() -> None:
    diags, _ = check(profile(group("rest", "a"), group("x", "b"), group("x", "c")))
    assert only(diags, "reserved_name").message == (
        "group name 'rest' is a compiled layer of its own (the catch-all, or the hinted default "
        "layer of title groups)")
    assert only(diags, "duplicate_name").message == (
        "group name 'x' is also group 2; layer names must be unique")


def test_exclusive_without_size() -> None:
    diag = only(check(profile(group("w", "a", treatment="exclusive")))[0],
                "exclusive_without_size")
    assert diag.message == ("exclusive group 'w' asks for 0 cores (hot_threads = 0, "
                            "no request_millicores)")


def test_overlap_full_shadow_is_an_error_and_names_the_threads() -> None:
    p = profile(group("io", "io_*"),
                group("iothd", "io_thd_*", evidence=Evidence(names=["io_thd_1", "io_thd_2"])))
    diags, lines = check(p)
    diag = only(diags, "overlap")
    assert diag.severity == "error"
    assert diag.message == ("group 'iothd' pattern 'io_thd_*' can never match: group 'io' comes "
                            "first and its 'io_*' takes every such thread (io_thd_1, io_thd_2)")
    assert diag.threads == ("io_thd_1", "io_thd_2")
    assert diag.hint == "move 'iothd' above 'io' or add 'io_thd_*' to the exclude list of 'io'"
    assert lines[diag.line - 1] == 'match = ["io_thd_*"]'


def test_overlap_excluded_prefix_is_fine() -> None:
    p = profile(group("io", "io_*", exclude=["io_thd_"]), group("iothd", "io_thd_*"))
    assert [d for d in check(p)[0] if d.rule == "overlap"] == []


def test_overlap_disjoint_runtime_ranges_are_fine() -> None:
    p = profile(group("short", "db", avg_runtime_us=[0, 100]),
                group("long", "db", avg_runtime_us=[100, 10_000]))
    assert [d for d in check(p)[0] if d.rule == "overlap"] == []


def test_overlap_partial_moves_recorded_threads_as_a_warning() -> None:
    p = profile(group("w1", "worker-1"),
                group("workers", "worker-*", evidence=Evidence(names=["worker-1", "worker-2"])))
    diag = only(check(p)[0], "overlap")
    assert diag.severity == "warning"
    assert diag.message == ("threads worker-1 recorded in group 'workers' also match 'worker-1' "
                            "of the earlier group 'w1': they land there (first match wins)")
    assert diag.threads == ("worker-1",)


def test_evidence_unmatched() -> None:
    diag = only(check(profile(group("w", "hot-", evidence=Evidence(names=["hot-1", "cold"]))))[0],
                "evidence_unmatched")
    assert diag.severity == "warning"
    assert diag.message == "group 'w' records threads its patterns do not match: cold"


def test_role_names_are_analyzes() -> None:
    """One list of roles: the profile schema's Role is the contract's, in the clusterer's order."""
    from threadwise.analyze.contract import ROLES, GroupRow, Role
    from threadwise.analyze.roles import PROTOTYPES
    from threadwise.synthesize import schema

    assert schema.Role is Role
    assert tuple(Role) == ROLES and len(ROLES) == len(PROTOTYPES)
    with pytest.raises(ValueError, match="'cpu-hog' is not a valid Role"):
        GroupRow(pattern="x", role="cpu-hog", confidence=1.0, match_prefixes=["x"], thread_count=1,
                 names=["x"], cpu_time_ns=0, cpu_share=0.0, max_thread_share=0.0, hot_threads=0,
                 wakeups_per_s=0.0)
