"""benchmarks/floor_draws.py on synthetic pools written as ladder files (no VM).

Each 3-subset must be judged with the judge's own A/A floors on exactly its repeats, and the
shares must follow the noise: tiny noise meets the +-10% target in every subset, large noise in
few.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import calibration as cal
import floor_draws

from tests.refine.test_calibration_smoke import PRIMARY, SECONDARY, synthetic, write_pool
from threadwise.refine.measure import stats
from threadwise.refine.measure.plan import AA_ARM, BASELINE


def test_a_subsets_floors_are_the_judges_on_its_repeats() -> None:
    measured = synthetic(6, spread=0.05)
    got = floor_draws.floors_of(measured, (2, 4, 6), [PRIMARY, SECONDARY], [0, 2])
    part = cal.restrict(measured, (2, 4, 6))   # calibration's own subsetting, renumbered 1..3
    want = stats.aa_floors(part, BASELINE, AA_ARM, [PRIMARY, SECONDARY])
    for metric in (PRIMARY, SECONDARY):
        for level in (0, 2):
            log_floor = want.floor(metric, 3, level)
            assert log_floor is not None
            assert math.isclose(got[(metric, level)], math.expm1(log_floor), rel_tol=1e-12)


def _share_row(text: str, metric: str, level: int) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {metric} | {level} |"))


def test_the_shares_follow_the_noise(tmp_path: Path) -> None:
    quiet, loud = tmp_path / "quiet.duckdb", tmp_path / "loud.duckdb"
    write_pool(quiet, synthetic(6, spread=0.005), 6)
    write_pool(loud, synthetic(6, spread=0.3), 6)
    quiet_text, loud_text = floor_draws.report(quiet, 1), floor_draws.report(loud, 1)
    assert "every 3-subset of them (20)" in quiet_text
    assert _share_row(quiet_text, PRIMARY, 2).split("|")[4].strip() == "100%"
    loud_share = _share_row(loud_text, PRIMARY, 2).split("|")[4].strip()
    assert int(loud_share.rstrip("%")) < 50, loud_text
    # two disjoint 3-subsets of 6 repeats: 10 splits, each in both roles
    assert "of 20 disjoint couples" in quiet_text
