"""benchmarks/floor_draws.py on synthetic pools written as ladder files (no VM).

Each 3-subset must be judged with the judge's own A/A floors on exactly its repeats, and the
shares must follow the noise: tiny noise meets the +-10% target in every subset, large noise in
few. Set against a quiet run, a loud one must fail the F test and the joint targets; the same
data against itself must not.
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
    quiet_text, loud_text = (floor_draws.report(floor_draws.load(quiet, 1)),
                             floor_draws.report(floor_draws.load(loud, 1)))
    assert "every 3-subset of them (20)" in quiet_text
    assert _share_row(quiet_text, PRIMARY, 2).split("|")[4].strip() == "100%"
    loud_share = _share_row(loud_text, PRIMARY, 2).split("|")[4].strip()
    assert int(loud_share.rstrip("%")) < 50, loud_text
    # two disjoint 3-subsets of 6 repeats: 10 splits, each in both roles
    assert "of 20 disjoint couples" in quiet_text


def _f_row(text: str, metric: str, level: int) -> list[str]:
    row = next(line for line in text.splitlines()
               if line.startswith(f"| {metric} | {level} |") and line.count("|") == 7)
    return [cell.strip() for cell in row.split("|")[1:-1]]


def test_a_loud_run_against_a_quiet_one(tmp_path: Path) -> None:
    quiet_file, loud_file = tmp_path / "quiet.duckdb", tmp_path / "loud.duckdb"
    write_pool(quiet_file, synthetic(6, spread=0.01), 6)
    write_pool(loud_file, synthetic(6, seed=5, spread=0.3), 6)
    quiet, loud = floor_draws.load(quiet_file, 1), floor_draws.load(loud_file, 1)
    loud_text = floor_draws.cross(quiet, loud)
    _, _, _, _, f_ratio, p = _f_row(loud_text, PRIMARY, 2)
    assert float(f_ratio) > 10 and float(p) < 0.01, loud_text
    assert "the busy one from run 1: 0% of 400 couples" in loud_text
    same_text = floor_draws.cross(quiet, quiet)
    _, _, s_quiet, s_busy, f_ratio, p = _f_row(same_text, PRIMARY, 2)
    assert s_quiet == s_busy and f_ratio == "1.00" and p == "0.50", same_text
    assert ": 100% of 400 couples" in floor_draws.cross(loud, quiet)
