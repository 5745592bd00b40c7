"""bpf tier: a simulated fleet of real captures (tests/simulated_fleet.py) trains one profile.

Four hosts (this machine under 0-3 background spinners) of five rolesim captures each: the
profile must validate and compile for scx_layered (its --print-and-exit is the oracle), every
group's comment must say how many hosts back it, and Spark must compute the features DuckDB
computed from the same Parquet. The captures are analyzed once (the fixture); the CLI's fleet
path is the same function on synthetic captures (tests/analyze/test_fleet.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.analyze.fleetcheck import assert_spark_agrees, spark_missing
from tests.conftest import alone_with_labs
from tests.simulated_fleet import HOSTS, simulate
from threadwise.analyze.fleet import FleetAnalysis, analyze_fleet
from threadwise.scx import SCX_LAYERED_VERSION
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.writer import dumps

pytestmark = pytest.mark.bpf

CAPTURES = 5


@pytest.fixture(scope="module")
def fleet_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet") / "tree"
    with alone_with_labs("simulated fleet"):
        simulate(root, captures=CAPTURES, duration_s=2.0, progress=lambda line: print(line, flush=True))
    return root


@pytest.fixture(scope="module")
def fleet(fleet_tree: Path) -> FleetAnalysis:
    return analyze_fleet([str(fleet_tree)])


def test_twenty_captures_of_four_hosts_train_one_profile(fleet: FleetAnalysis, tmp_path: Path):
    assert fleet.hosts == sorted(h.name for h in HOSTS) and fleet.captures == len(HOSTS) * CAPTURES
    profile = build_profile(fleet.record, "rolesim-fleet")
    assert not [d for d in validate(profile) if d.severity == "error"]
    path = tmp_path / "rolesim-fleet.toml"
    text = dumps(profile)
    path.write_text(text)
    assert f"trained from a fleet: {fleet.captures} captures of {len(HOSTS)} hosts" in text
    for group in fleet.groups:   # every group's evidence, with its host count, is in a comment
        assert f"fleet: {group.pattern} on {len(group.hosts)} of {len(HOSTS)} hosts" in text, group.pattern
    assert any(len(g.hosts) == len(HOSTS) for g in fleet.groups)
    checked = subprocess.run([sys.executable, "-m", "threadwise.cli", "compile", str(path), "--check",
                              "--shape", "cores=2,tpc=1"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert f"scx_layered {SCX_LAYERED_VERSION} accepts the config" in checked.stderr


@pytest.mark.skipif(spark_missing() is not None, reason=spark_missing() or "")
def test_duckdb_and_spark_agree_on_the_real_fleet(fleet_tree: Path, fleet: FleetAnalysis):
    assert_spark_agrees(fleet_tree, fleet)
