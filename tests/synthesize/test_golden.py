"""Golden profiles: the same analysis gives byte-identical TOML and JSON, reviewed once.

Inputs are analyses in the `Analysis` contract shape (docs/interfaces.md) stored
as JSON under fixtures/analysis/: `rolesim`/`redis` are HAND-BUILT; the
`*-capture` ones are the analyses of real bpftrace captures of the bundled
workload and of Redis, exported with
`analysis_to_dict(from_analysis(analyze_capture(CAPTURE)))` (the captures
themselves are too big to commit). When analyze changes, re-export them,
regenerate with THREADWISE_UPDATE_GOLDEN=1, and review the diff.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import polars as pl
import pytest

from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.build import analysis_from_dict, build_profile, from_analysis
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.layers import views_from_profile
from threadwise.synthesize.lint import lint
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.rules import check_file
from threadwise.synthesize.writer import dumps

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden"
SHAPE = "cores=4,threads-per-core=2"
# Hand-built analyses (rules on display: request sizing, every treatment) and the analyses
# of real captures of the bundled workload and Redis (exported JSON, see the module note).
# redis-poller-capture (issue 23) carries analyze's poller fields: its io thread is a busy-poller
# and gets latency without preempt; the older exports predate those fields (read as no pollers).
CASES = ["rolesim", "redis", "rolesim-capture", "redis-capture", "redis-poller-capture"]
UPDATE = os.environ.get("THREADWISE_UPDATE_GOLDEN") == "1"


def _analysis(case: str):
    return analysis_from_dict(json.loads((FIXTURES / "analysis" / f"{case}.json").read_text()))


def _compare(path: Path, text: str) -> None:
    """`text` must equal the golden as it was before this test ran.

    With THREADWISE_UPDATE_GOLDEN=1 a changed golden is rewritten, and the test
    still fails (naming the file), so an update is never a silent pass: review
    the diff, then run again without the variable.
    """
    before = path.read_text() if path.exists() else None
    if UPDATE and text != before:
        path.write_text(text)
    assert before is not None, f"no golden {path.name}: run with THREADWISE_UPDATE_GOLDEN=1 and review"
    assert text == before, (f"{path.name} changed" + (" (rewritten: review `git diff`, then re-run)"
                                                      if UPDATE else ": review, then update the golden"))


@pytest.mark.parametrize("case", CASES)
def test_golden_profile(case: str) -> None:
    profile = build_profile(_analysis(case), case, capture=f"{case}.duckdb")
    _compare(GOLDEN / f"{case}.toml", dumps(profile))


@pytest.mark.scx
@pytest.mark.parametrize("case", CASES)
def test_golden_compiled_and_accepted(case: str, scx_binary: Path) -> None:
    profile, _ = load_profile(GOLDEN / f"{case}.toml")
    compiled = compile_profile(profile, parse_shape(SHAPE))
    _compare(GOLDEN / f"{case}.{SHAPE.replace(',', '.')}.json", compiled.to_json())
    # with its flags, as attached
    assert oracle.check(compiled.config, scx_binary, args=compiled.scx_args) == []


@pytest.mark.parametrize("case", CASES)
def test_golden_profiles_are_valid_and_lint_clean(case: str) -> None:
    profile, problems = check_file(GOLDEN / f"{case}.toml")
    assert profile is not None and problems == []
    shape = parse_shape(SHAPE)
    assert lint(views_from_profile(profile, shape), shape) == []


# train's 2-vCPU lab (refine/measure/run.py LAB_SHAPE): synthesize is told the shape it will be measured on
LAB_SHAPE = "cores=2,threads-per-core=1"


def test_golden_profile_sized_for_the_lab_is_lint_clean_there() -> None:
    """rolesim's two hot threads on the lab's one core outside the reserve (issue 21: unsized, the
    profile asked for 2 exclusive cores there, lint flagged it, and it was measured anyway)."""
    shape = parse_shape(LAB_SHAPE)
    case = "rolesim-capture"
    profile = build_profile(_analysis(case), case, capture=f"{case}.duckdb", shape=shape)
    _compare(GOLDEN / f"{case}.sized-{LAB_SHAPE.replace(',', '.')}.toml", dumps(profile))
    assert lint(views_from_profile(profile, shape), shape) == []
    unsized = build_profile(_analysis(case), case, capture=f"{case}.duckdb")
    assert [f.lint for f in lint(views_from_profile(unsized, shape), shape)] == ["oversubscribed"]


def test_from_analysis_reads_the_contract_dataframe() -> None:
    """The adapter takes `Analysis.groups` as the polars DataFrame the contract names."""
    analysis = _analysis("rolesim")
    rows = [dict(vars(row)) for row in analysis.groups]

    class FakeAnalysis:  # shaped like threadwise.analyze.Analysis
        groups = pl.DataFrame(rows).with_columns(pl.lit(1).alias("extra_column"))
        process_name = analysis.process_name
        duration_ns = analysis.duration_ns
        nr_cpus = analysis.nr_cpus
        events_lost = analysis.events_lost
        caveats = analysis.caveats

    assert from_analysis(FakeAnalysis()) == analysis


def test_updating_a_golden_still_fails_when_it_changed(tmp_path: Path, monkeypatch) -> None:
    """THREADWISE_UPDATE_GOLDEN rewrites a changed golden but never passes on it."""
    module = sys.modules[__name__]
    golden = tmp_path / "g.toml"
    golden.write_text("old\n")
    monkeypatch.setattr(module, "UPDATE", True)
    with pytest.raises(AssertionError, match=r"g\.toml changed"):
        _compare(golden, "new\n")
    assert golden.read_text() == "new\n"
    _compare(golden, "new\n")   # unchanged now: passes
    monkeypatch.setattr(module, "UPDATE", False)
    with pytest.raises(AssertionError, match="review, then update"):
        _compare(golden, "newer\n")
    assert golden.read_text() == "new\n"
