"""Confidence from evidence (issue 11, item 3): a role's confidence falls with few slices,
few wakeups (for the roles read from wakeups), a short life, or a busiest thread near the hot
cutoff; the thinnest evidence decides and the reason travels to the profile's comment.
Threads that lived under the minimum form no group: the workload's catch-all names them."""

from __future__ import annotations

import pytest

from tests.synthesize.test_compact import jvm_like, row
from threadwise.analyze import analyze_capture
from threadwise.analyze.contract import HOT_SHARE, AnalysisRecord
from threadwise.analyze.groups import (
    FULL_LIFE_NS,
    MIN_SLICES,
    MIN_WAKEUPS,
    NEAR_HOT_FLOOR,
    thin_evidence,
)
from threadwise.observe.builder import CaptureBuilder
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.writer import dumps

US = 1_000
T0 = 1_000_000_000
SECOND = 1_000_000_000
PLENTY = {"slices": 1000, "wakeups": 1000, "life_ns": 5 * SECOND, "duration_ns": 5 * SECOND,
          "max_thread_share": 0.05}


def test_plenty_of_evidence_keeps_the_confidence() -> None:
    for role in ("compute", "latency", "housekeeping", "batch"):
        assert thin_evidence(role, **{**PLENTY, "max_thread_share": 0.95}) == (1.0, [])
    assert thin_evidence("default", **{**PLENTY, "slices": 0, "wakeups": 0}) == (1.0, [])


def test_few_wakeups_lower_only_the_roles_read_from_wakeups() -> None:
    weight, why = thin_evidence("housekeeping", **{**PLENTY, "wakeups": 4})
    assert weight == pytest.approx((4 / MIN_WAKEUPS) ** 0.5) and why == [f"4 wakeups (< {MIN_WAKEUPS})"]
    assert thin_evidence("latency", **{**PLENTY, "wakeups": 0})[0] == 0.0
    # a spinner is not judged by its wakeups: it hardly sleeps
    assert thin_evidence("compute", **{**PLENTY, "wakeups": 0, "max_thread_share": 0.95}) == (1.0, [])


def test_a_short_life_lowers_the_confidence() -> None:
    weight, why = thin_evidence("batch", **{**PLENTY, "life_ns": 250_000_000})
    assert weight == pytest.approx(0.5) and why == ["lived 250 ms (< 1000 ms)"]
    # a capture shorter than FULL_LIFE_NS: living through all of it is all there was to see
    assert thin_evidence("batch", **{**PLENTY, "life_ns": SECOND // 2, "duration_ns": SECOND // 2}) == (
        1.0, [])
    assert FULL_LIFE_NS == SECOND


def test_a_busiest_thread_near_the_hot_cutoff_lowers_a_compute_role() -> None:
    on_it, why = thin_evidence("compute", **{**PLENTY, "max_thread_share": HOT_SHARE})
    assert on_it == pytest.approx(NEAR_HOT_FLOOR) and "near the hot cutoff" in why[0]
    edge = thin_evidence("compute", **{**PLENTY, "max_thread_share": HOT_SHARE * 1.1})[0]
    assert NEAR_HOT_FLOOR < edge < 1.0
    assert thin_evidence("compute", **{**PLENTY, "max_thread_share": 0.95}) == (1.0, [])
    assert thin_evidence("batch", **{**PLENTY, "max_thread_share": HOT_SHARE}) == (1.0, [])
    # at the edge of the band the factor would print as x1.00: not reported
    assert thin_evidence("compute", **{**PLENTY, "max_thread_share": 0.599}) == (1.0, [])


def test_the_thinnest_evidence_decides_and_every_reason_is_named() -> None:
    weight, why = thin_evidence("housekeeping", **{**PLENTY, "slices": 5, "wakeups": 8})
    assert weight == pytest.approx(min((5 / MIN_SLICES) ** 0.5, (8 / MIN_WAKEUPS) ** 0.5))
    assert why == [f"5 slices (< {MIN_SLICES})", f"8 wakeups (< {MIN_WAKEUPS})"]


def test_a_capture_with_a_short_lived_group_says_so(tmp_path) -> None:
    """`loop` runs all through a 2 s capture; `late` is born 1.7 s in and runs 9 ms of every
    10 ms: a clear role, but read from 305 ms of life, so its confidence falls."""
    cap = CaptureBuilder(target_tgids=[500], duration_ns=2 * SECOND)
    cap.thread(500, 500, "svc")
    cap.thread(501, 500, "loop")
    cap.periodic(501, 0, first_ts=T0 + 1_000 * US, run_ns=200 * US, period_ns=10_000 * US, count=190)
    cap.thread(502, 500, "late", born_ts=T0 + 1_690_000 * US, exit_ts=T0 + 1_995_000 * US)
    cap.periodic(502, 1, first_ts=T0 + 1_700_000 * US, run_ns=9_000 * US, period_ns=10_000 * US,
                 count=29)
    analysis = analyze_capture(cap.write(tmp_path / "late.duckdb"))
    rows = {r["pattern"]: r for r in analysis.groups.iter_rows(named=True)}
    late, loop = rows["late"], rows["loop"]
    assert loop["thin_evidence"] is None, loop
    assert late["role"] != "default" and "lived 305 ms (< 1000 ms)" in (late["thin_evidence"] or ""), late
    assert late["confidence"] < loop["confidence"]
    assert "thin evidence" in (late["note"] or "")


def test_the_profile_says_when_a_decision_rests_on_little() -> None:
    base = jvm_like()
    thin = row("late", "housekeeping", 0.002, wakeups_per_s=10.0, confidence=0.6,
               thin_evidence="lived 305 ms (< 1000 ms): confidence x0.55")
    profile = build_profile(AnalysisRecord(process_name="java", duration_ns=base.duration_ns, nr_cpus=2,
                                           groups=[*base.groups, thin]), "jvm")
    text = dumps(profile)
    assert "decided on thin evidence: lived 305 ms (< 1000 ms): confidence x0.55" in text, text


def test_short_lived_threads_are_named_in_the_catch_all() -> None:
    base = jvm_like()
    record = AnalysisRecord(process_name="java", duration_ns=base.duration_ns, nr_cpus=2,
                            groups=base.groups, short_lived=["tmp-job"])
    profile = build_profile(record, "jvm")
    rest = profile.groups[-1]
    assert rest.match == ["*"]
    assert ("also takes: 1 thread name(s) lived under 100 ms in the capture, too short to judge, "
            "so they form no group of their own: tmp-job") in (rest.comment or "")
