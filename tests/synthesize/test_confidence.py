"""Confidence from evidence: thin evidence lowers a role's confidence (analyze), a thread near
the hot cutoff is flagged for refine, a bigger shape than the capture's machine is a caveat."""

from __future__ import annotations

import pytest

from tests.synthesize.test_compact import jvm_like, row
from threadwise.analyze.groups import MIN_SLICES, evidence_weight
from threadwise.shape import parse_shape
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compile import compile_profile


@pytest.mark.parametrize(("slices", "weight"), [(0, 0.0), (1, (1 / MIN_SLICES) ** 0.5), (5, 0.5),
                                                (MIN_SLICES, 1.0), (10_000, 1.0)])
def test_few_slices_lower_the_confidence(slices: int, weight: float) -> None:
    assert evidence_weight(slices) == pytest.approx(weight)


def test_a_thread_near_the_hot_cutoff_is_a_candidate_both_ways() -> None:
    base = jvm_like()
    near = row("batchy", "batch", 0.46, max_thread_share=0.46)
    profile = build_profile(type(base)(process_name="java", duration_ns=base.duration_ns, nr_cpus=2,
                                       groups=[*base.groups, near]), "jvm")
    [group] = [g for g in profile.groups if g.name == "batchy"]
    assert "near the hot cutoff (0.5 CPU): a candidate for refine to try both ways" in (group.comment or "")


def test_compiling_for_a_bigger_machine_than_the_capture_says_so() -> None:
    profile = build_profile(jvm_like(), "jvm")      # captured on 2 CPUs
    small = compile_profile(profile, parse_shape("cores=2,threads-per-core=1"))
    big = compile_profile(profile, parse_shape("cores=8,threads-per-core=2"))
    assert not any("the capture ran on" in n for n in small.notes)
    assert any("compiled for 16 CPUs, but the capture ran on 2" in n for n in big.notes)
