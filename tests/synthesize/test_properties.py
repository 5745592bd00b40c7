"""Property tests: TOML round trips exactly (option overrides and [catch_all] included); compiled
options survive the real scx_layered."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from threadwise.errors import InputError
from threadwise.shape import synthetic
from threadwise.synthesize import oracle
from threadwise.synthesize.build import AnalysisInput, GroupRow, build_profile
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import (
    CatchAll,
    Evidence,
    Group,
    Profile,
    Role,
    Source,
    Treatment,
    Workload,
)
from threadwise.synthesize.writer import dumps

NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True)
PREFIXES = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x24F, exclude_characters="*?["),
    min_size=1, max_size=15,
).filter(lambda s: len(s.encode()) <= 15)
PATTERNS = PREFIXES | PREFIXES.map(lambda p: p + "*")
TEXT = st.text(max_size=40)


def finite(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


def optional(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


EVIDENCE = st.builds(
    Evidence, role=optional(st.sampled_from(Role)), confidence=optional(finite(0, 1)),
    threads=st.integers(0, 10_000), names=st.lists(PREFIXES, max_size=6),
    cpu_share=finite(0, 512), max_thread_share=finite(0, 1), wakeups_per_s=finite(0, 1e7),
    slice_p50_us=optional(finite(0, 1e7)), slice_p99_us=optional(finite(0, 1e7)),
    rq_latency_p50_us=optional(finite(0, 1e7)), rq_latency_p99_us=optional(finite(0, 1e7)),
    in_wake_chain=st.booleans(), separable=st.booleans(),
)
RUNTIMES = st.tuples(st.integers(0, 10**6), st.integers(1, 10**6)).map(
    lambda t: [min(t), max(t) + 1])
GROUPS = st.builds(
    Group, name=NAMES, match=st.lists(PATTERNS, min_size=1, max_size=4),
    exclude=st.lists(PREFIXES, max_size=3), avg_runtime_us=optional(RUNTIMES),
    treatment=st.sampled_from(Treatment), hot_threads=st.integers(0, 64),
    cpu_fraction=st.floats(0, 1, exclude_min=True), request_millicores=optional(
        st.integers(1, 10**6)), slice_us=optional(st.integers(1, 10**6)),
    weight=optional(st.integers(1, 10_000)), comment=optional(TEXT), evidence=optional(EVIDENCE),
)


@st.composite
def tuned_groups(draw: st.DrawFn) -> Group:
    """A group with option overrides, only in combinations rules.py accepts."""
    group = draw(GROUPS)
    owns = group.treatment is Treatment.EXCLUSIVE
    preempt = draw(optional(st.booleans()))
    preset_preempts = group.treatment in (Treatment.EXCLUSIVE, Treatment.LATENCY)
    preempting = preempt if preempt is not None else preset_preempts
    protected = draw(optional(st.booleans())) if owns else None
    held = owns and preempt is False and protected is False
    return group.model_copy(update={
        "preempt": preempt, "protected": protected,
        "preempt_first": draw(optional(st.booleans() if preempting else st.just(False))),
        "exclusive": draw(optional(st.booleans() if owns else st.just(False))),
        "min_exec_us": draw(optional(st.integers(0, 10**6))),
        "disallow_preempt_after_us": draw(optional(st.integers(0, 10**7))) if held else None,
    })


CATCH_ALLS = st.builds(CatchAll, slice_us=optional(st.integers(1, 10**6)),
                       weight=optional(st.integers(1, 10_000)), preempt=optional(st.booleans()))
SOURCES = st.builds(
    Source, capture=optional(TEXT), duration_s=optional(finite(0, 1e6)),
    nr_cpus=optional(st.integers(1, 1024)), events_lost=optional(st.integers(0, 10**9)),
    caveats=st.lists(TEXT, max_size=3),
)
PROFILES = st.builds(
    Profile, schema_version=st.just(1), name=NAMES, comment=optional(TEXT),
    workload=st.builds(Workload, process=PREFIXES), source=optional(SOURCES),
    group=st.lists(GROUPS | tuned_groups(), min_size=1, max_size=6, unique_by=lambda g: g.name),
    catch_all=optional(CATCH_ALLS),
)
SHAPES = st.builds(synthetic, st.integers(1, 16), st.integers(1, 4), st.integers(0, 2))


@given(PROFILES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_profile_toml_profile_is_identity(profile: Profile) -> None:
    text = dumps(profile)
    again, _ = parse_profile(text)
    assert again == profile
    assert dumps(again) == text


@pytest.mark.scx
@given(profile=PROFILES, shape=SHAPES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_compiled_options_survive_scx_layered(scx_binary: Path, profile: Profile, shape) -> None:
    assume(not [d for d in validate(profile) if d.severity == "error"])
    config = compile_profile(profile, shape).config
    assert oracle.mismatches(config, oracle.print_and_exit(config, scx_binary)) == []


ROWS = st.builds(
    GroupRow,
    pattern=st.text("ab-*", min_size=1, max_size=6),
    role=st.sampled_from([r.value for r in Role]),
    confidence=finite(0, 1),
    # A small alphabet makes shared and nested prefixes common; odd characters test cleaning.
    match_prefixes=st.lists(st.text("abc-_*?[\x01é", min_size=1, max_size=20), min_size=1,
                            max_size=40),
    exclude_prefixes=st.lists(st.text("abc-", min_size=1, max_size=5), max_size=30),
    separable=st.booleans(),
    thread_count=st.integers(1, 50),
    names=st.lists(st.text("abc-_", min_size=1, max_size=15), max_size=8),
    cpu_time_ns=st.integers(0, 10**12),
    cpu_share=finite(0, 64), max_thread_share=finite(0, 1), hot_threads=st.integers(0, 8),
    wakeups_per_s=finite(0, 1e6),
    avg_runtime_range_ns=st.none() | st.tuples(st.integers(0, 10**6), st.integers(1, 10**6)).map(
        lambda t: [min(t) * 1000, (max(t) + 1) * 1000]),
    poller_threads=st.integers(0, 3), poller_evidence=st.none() | TEXT,
)
ANALYSES = st.builds(
    AnalysisInput,
    process_name=st.text("abcxyz-", min_size=1, max_size=20) | st.text("abcxyz-[*", min_size=1),
    duration_ns=st.integers(1, 10**11), nr_cpus=st.integers(1, 64),
    groups=st.lists(ROWS, min_size=1, max_size=20), events_lost=st.integers(0, 10**6),
)


@given(ANALYSES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_synthesized_profiles_are_valid_by_construction(analysis: AnalysisInput) -> None:
    try:
        profile = build_profile(analysis, "gen")
    except InputError as nothing:  # every prefix cut away: nothing expressible to build
        assert "can be written as a comm prefix" in nothing.message
        return
    errors = [d.render() for d in validate(profile) if d.severity == "error"]
    assert errors == []
    assert dumps(build_profile(analysis, "gen")) == dumps(profile)


def test_a_comment_with_a_carriage_return_reads_back_the_same() -> None:
    """Found by the property above on a fresh clone: TOML readers normalise the line endings of
    multi-line strings, so a value with '\\r' is written as a one-line string with escapes."""
    from threadwise.synthesize.schema import Group, Treatment, Workload

    profile = Profile(schema_version=1, name="x", workload=Workload(process="x"),
                      groups=[Group(name="a", match=["a"], treatment=Treatment.DEFAULT, comment="a\r\nb")])
    assert parse_profile(dumps(profile))[0] == profile
