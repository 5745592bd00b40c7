"""Many captures, one fleet (analyze/fleet*.py): inputs, the two engines, the merge across hosts.

The fast tier runs on synthetic captures (tests/synthetic/bulk.py) exported as Parquet: the
engines must agree (DuckDB as written, Spark as SQLGlot transpiles it), and the merge must size
and describe groups from the hosts' figures. tests/analyze/test_bpf_fleet.py does the same on
real captures of rolesim.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.analyze.fleetcheck import assert_spark_agrees, spark_missing
from tests.synthetic.bulk import bulk_capture
from threadwise.analyze.fleet import GroupAcrossHosts, analyze_fleet, nearest_rank, outliers, render_fleet
from threadwise.analyze.fleet_engine import spark_sql
from threadwise.analyze.fleet_inputs import open_fleet
from threadwise.errors import UsageError
from threadwise.observe.interop.parquet import export_parquet

HOSTS = ("2024", "web-a", "web-b")   # a host named like a number must stay a name


@pytest.fixture(scope="module")
def fleet_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 hosts x 2 synthetic captures of 30,000 switches, as one Parquet tree."""
    base = tmp_path_factory.mktemp("fleet")
    for number, host in enumerate(HOSTS):
        for capture in range(2):
            path = base / f"{host}-{capture}.duckdb"
            bulk_capture(path, switches=30_000, seed=10 * number + capture)
            export_parquet(path, base / "tree", host=host)
    return base


def test_nearest_rank_and_outliers():
    assert nearest_rank([0.1, 0.4, 0.2, 0.3], 0.9) == 0.4   # p90 of 4 hosts: the busiest
    assert nearest_rank([0.1, 0.4, 0.2, 0.3], 0.5) == 0.2
    assert nearest_rank([0.3], 0.1) == 0.3
    assert outliers({"a": 0.30, "b": 0.31, "c": 0.29, "d": 0.95}) == {"d": 0.95}
    assert outliers({"a": 0.010, "b": 0.011, "c": 0.012, "d": 0.04}) == {}   # under 0.05 CPU apart
    assert outliers({"a": 0.1, "b": 0.9}) == {}   # two hosts: no median to stand apart from


def test_the_evidence_says_where_hosts_disagree():
    group = GroupAcrossHosts("worker-*", ["a", "b", "c"], 6, {"a": 0.3, "b": 0.31, "c": 0.9}, 0.9,
                             {"a": "latency", "b": "latency", "c": "compute"}, "latency", {"c": 0.9})
    words = group.words(4, 0.9)
    assert words.startswith("fleet: worker-* on 3 of 4 hosts (6 captures)")
    assert "p90 across hosts of its CPU share, 0.9 CPUs" in words
    assert "role latency on 2 of 3 hosts (compute on c)" in words
    assert "outlier: c 0.9 against a median of 0.31" in words


def test_inputs_a_tree_a_glob_and_files_are_one_fleet(fleet_tree: Path):
    with open_fleet([str(fleet_tree / "tree")]) as fleet:
        assert fleet.hosts == sorted(HOSTS) and len(fleet.captures) == 6
        assert fleet.root == (fleet_tree / "tree").resolve()   # read in place
    with open_fleet([str(fleet_tree / "tree" / "host=web-*"), str(fleet_tree / "2024-0.duckdb")]) as fleet:
        # a DuckDB capture's host is the one it recorded (export --host renames only the Parquet)
        assert fleet.hosts == ["synthetic", "web-a", "web-b"] and len(fleet.captures) == 5
        assert fleet.root != (fleet_tree / "tree").resolve()   # a staging tree holds the mix
        assert all((c.partition / "sched_slice.parquet").is_file() for c in fleet.captures)
    with open_fleet([str(fleet_tree / "*.duckdb")]) as fleet:
        assert len(fleet.captures) == 6
    with open_fleet([str(fleet_tree / "tree"), str(fleet_tree / "*.duckdb")]) as fleet:
        assert len(fleet.captures) == 6   # each capture named twice counts once (by its id)
    nowhere = str(fleet_tree / "nothing-*.duckdb")
    with pytest.raises(UsageError, match="matches nothing"), open_fleet([nowhere]):
        pass
    (fleet_tree / "empty").mkdir(exist_ok=True)
    with pytest.raises(UsageError, match="no captures"), open_fleet([str(fleet_tree / "empty")]):
        pass


def test_the_fleet_sizes_each_group_at_the_quantile_across_hosts(fleet_tree: Path):
    fleet = analyze_fleet([str(fleet_tree / "tree")], quantile=0.5)
    hosts = fleet.tables.hosts
    assert sorted(set(hosts["host"].to_list())) == sorted(HOSTS)
    by_pattern = {row.pattern: row for row in fleet.record.groups}
    for group in fleet.groups:
        shares = hosts.filter(pl.col("pattern") == group.pattern)["cpu_share"].to_list()
        assert group.sized_share == nearest_rank(shares, 0.5)
        assert by_pattern[group.pattern].cpu_share == group.sized_share
        assert group.hosts == sorted(HOSTS) and group.captures == 6
    assert fleet.record.caveats[0].startswith("trained from a fleet: 6 captures of 3 hosts")
    # the engine's share of a capture is analyze's group share of that capture (same window, same slices)
    captures = fleet.tables.captures.filter(pl.col("pattern") == "hot-*")
    assert captures.height == 6 and captures["cpu_share"].min() > 0


@pytest.mark.skipif(spark_missing() is not None, reason=spark_missing() or "")
def test_duckdb_and_spark_compute_the_same_features(fleet_tree: Path):
    assert_spark_agrees(fleet_tree / "tree", analyze_fleet([str(fleet_tree / "tree")]))
    assert "PERCENTILE_DISC(0.9) WITHIN GROUP" in spark_sql("group_capture")   # exact, not approximate


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True, text=True,
                          check=False)


def test_the_commands_take_a_fleet(fleet_tree: Path, tmp_path: Path):
    tree = str(fleet_tree / "tree")
    shown = _cli("analyze", tree, "--host-quantile", "0.5")
    assert shown.returncode == 0, shown.stderr
    assert "fleet: 6 captures of 3 hosts (2024, web-a, web-b), features on duckdb" in shown.stdout
    assert "each group sized at p50 across hosts" in shown.stdout
    assert "analyze 6/6: host web-b" in shown.stderr   # progress, on stderr
    profile = tmp_path / "fleet.toml"
    written = _cli("synthesize", f"{tree}/host=*", "--name", "bulk-fleet", "-o", str(profile))
    assert written.returncode == 0, written.stderr
    text = profile.read_text()
    assert "trained from a fleet: 6 captures of 3 hosts" in text and "fleet: hot-* on 3 of 3 hosts" in text
    refused = _cli("analyze", tree, "--spark-master", "local[2]")
    assert refused.returncode != 0 and "--spark-master is for --engine spark" in refused.stderr
    refused = _cli("analyze", tree, "--store")
    assert refused.returncode != 0 and "--store and -o write one capture's analysis" in refused.stderr


def test_a_title_split_keeps_its_parts(tmp_path: Path):
    """PostgreSQL's processes share one comm: its title groups share the pattern `postgres`. The
    fleet keeps the parts of one capture, each its own group, and says so."""
    from tests.analyze.test_titles import postgres
    from threadwise.synthesize.build import build_profile
    from threadwise.synthesize.rules import validate

    for host in ("pg-a", "pg-b"):
        postgres(tmp_path, name=host)
        export_parquet(tmp_path / f"{host}.duckdb", tmp_path / "tree", host=host)
    fleet = analyze_fleet([str(tmp_path / "tree")])
    titled = {tuple(r.title_patterns) for r in fleet.record.groups}
    assert {("postgres: checkpointer",), ("postgres: walwriter",), ("postgres: bench bench",)} <= titled
    split = [r for r in fleet.record.groups if r.pattern == "postgres"]
    assert len(split) > 3 and all("split by title or behaviour in 2 of 2 captures" in (r.fleet_evidence or "")
                                  for r in split)
    assert "postgres " in render_fleet(fleet)   # one line for the pattern, however many parts it keeps
    profile = build_profile(fleet.record, "pg-fleet")
    assert not [d for d in validate(profile) if d.severity == "error"]
    assert sum(1 for g in profile.groups if g.title) >= 3
