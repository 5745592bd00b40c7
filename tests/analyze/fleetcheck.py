"""What the fleet tests share: whether Spark can run here, and the engines' results compared."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

from threadwise.analyze.fleet import FleetAnalysis
from threadwise.analyze.fleet_engine import FleetTables, SparkEngine
from threadwise.analyze.fleet_inputs import open_fleet


def spark_missing() -> str | None:
    """Why the Spark engine cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (./scripts/setup-python.sh installs it)"
    if shutil.which("java") is None:
        return ("no java on PATH: Spark needs a JRE 17 or later (scripts/setup-system.sh installs "
                "openjdk-17-jdk-headless)")
    return None


def assert_same_features(duck: FleetTables, spark: FleetTables) -> None:
    """Every count, sum, discrete percentile and name exactly equal; doubles to 1e-12 of the column
    (sums taken in another order may differ in the last bits)."""
    for name in ("threads", "captures", "hosts"):
        a, b = getattr(duck, name), getattr(spark, name)
        assert a.columns == b.columns and a.height == b.height > 0, name
        for column in a.columns:
            if a[column].dtype == pl.Float64:
                assert ((a[column] - b[column]).abs() <= 1e-12 * a[column].abs().max()).all(), (name, column)
            else:
                same = a[column].cast(pl.String).to_list() == b[column].cast(pl.String).to_list()
                assert same, (name, column)


def assert_spark_agrees(tree: Path, fleet: FleetAnalysis) -> None:
    """Spark, over the same tree and the same grouping, computes what DuckDB computed for `fleet`."""
    with open_fleet([str(tree)]) as again:   # the tree in place: nothing imported
        spark = SparkEngine().features([c.partition for c in again.captures], fleet.group_map)
    assert_same_features(fleet.tables, spark)
