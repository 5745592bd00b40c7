"""The engines that compute a fleet's features: DuckDB (embedded, the default) and Apache Spark.

Problem: one machine's DuckDB reads a fleet of a few hundred captures well (benchmarks/fleet.py);
a fleet that outgrows one machine needs a cluster engine over the same Parquet. Two hand-kept
copies of the feature SQL would drift.

Approach: the queries are written once, in DuckDB's dialect (fleet_features.sql). DuckDB runs
them as written; Spark runs them transpiled by SQLGlot (`sqlglot.transpile(read="duckdb",
write="spark")`), so the only Spark-specific code here is how the Parquet files become views.
SQLGlot over Ibis: the project keeps its queries in .sql modules with commented columns (a
reviewer reads SQL, tests/test_boundaries.py keeps SQL out of Python); SQLGlot keeps them so,
where Ibis would rewrite every query as Python expressions. What SQLGlot cannot carry shows up
as a Spark error in the parity test (tests/analyze/test_fleet.py), which runs both engines.

Both engines see the same four relations (fleet_features.sql's header): the captures'
`sched_slice`, `thread_wait` and `capture` tables as one relation each (host and capture from
the hive partition, read as text: a host named `2024` stays a name), and `fleet_group`, each
grouped thread's pattern. Each statement's result is kept as a view named after it.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Protocol

import duckdb
import polars as pl

from threadwise.errors import InputError, MissingTool, UsageError
from threadwise.sqlfiles import identifier, statements

ENGINES = ("duckdb", "spark")
STATEMENTS = ("thread_capture", "group_capture", "group_host")
PARTITIONED = ("sched_slice", "thread_wait")   # read with the partition's host and capture
SPARK_MASTER = "local[2]"
SPARK_MEMORY = "4g"   # the driver's heap (in local mode, all of Spark's): 250M events ran in 6.8 GB RSS


def feature_sql(name: str) -> str:
    """One statement of fleet_features.sql, in DuckDB's dialect (the one source)."""
    return statements("threadwise.analyze", "fleet_features.sql")[name]


@cache
def _spark_dialect() -> Any:
    """SQLGlot's Spark dialect, but exact percentiles stay exact.

    SQLGlot 30 writes `percentile_disc(q) WITHIN GROUP (ORDER BY x)` for Spark as
    `PERCENTILE_APPROX(x, q)` (Spark 2 had no exact form); Spark 3.3 and later run the WITHIN
    GROUP form, exactly. The parity test found it: p90 slice lengths 0.01% apart.
    """
    # deferred: sqlglot is needed only by the Spark engine
    from sqlglot import exp
    from sqlglot.dialects.spark import Spark
    from sqlglot.generators.spark import SparkGenerator

    class ExactSpark(Spark):
        class Generator(SparkGenerator):
            TRANSFORMS: ClassVar = {k: v for k, v in SparkGenerator.TRANSFORMS.items()
                                    if k is not exp.WithinGroup}

    return ExactSpark


def spark_sql(name: str) -> str:
    """The same statement for Spark SQL, transpiled by SQLGlot."""
    # deferred: sqlglot is needed only by the Spark engine
    import sqlglot

    (text,) = sqlglot.transpile(feature_sql(name), read="duckdb", write=_spark_dialect())
    return text


@dataclass(frozen=True)
class FleetTables:
    """The engine's results, one polars frame per statement of fleet_features.sql."""

    threads: pl.DataFrame   # thread_capture
    captures: pl.DataFrame  # group_capture
    hosts: pl.DataFrame     # group_host


class Engine(Protocol):
    name: str

    def features(self, partitions: list[Path], groups: pl.DataFrame) -> FleetTables: ...


def _tables(results: dict[str, pl.DataFrame]) -> FleetTables:
    """The results in one order whatever the engine (neither orders its output)."""
    return FleetTables(results["thread_capture"].sort(["host", "capture", "utid"]),
                       results["group_capture"].sort(["host", "capture", "pattern"]),
                       results["group_host"].sort(["host", "pattern"]))


def _files(partitions: list[Path], table: str) -> list[str]:
    """Each partition's `table` file: exactly the fleet's captures, never the rest of their tree."""
    missing = [str(p) for p in partitions if not (p / f"{table}.parquet").is_file()]
    if missing or not partitions:
        raise InputError(f"no {table}.parquet in {', '.join(missing[:3]) or 'the fleet'}",
                         hint="give captures exported by `threadwise export --format parquet`")
    return [str(p / f"{table}.parquet") for p in partitions]


def _base(partitions: list[Path]) -> str:
    """The tree's root (ROOT of ROOT/host=H/capture=C), where partition discovery starts."""
    (root,) = {str(p.parent.parent.resolve()) for p in partitions}
    return root


class DuckDBEngine:
    """The fleet's features in an embedded DuckDB (this process, this machine)."""

    name = "duckdb"

    def __init__(self, memory_limit: str | None = None) -> None:
        self.memory_limit = memory_limit   # None: DuckDB's own, 80% of the machine's memory

    def features(self, partitions: list[Path], groups: pl.DataFrame) -> FleetTables:
        # the exact percentiles keep every slice length of a group in memory (a holistic aggregate),
        # so a fleet's needs grow with its largest captures; the rest spills to a private directory
        con = duckdb.connect()
        scratch = tempfile.mkdtemp(prefix="threadwise-fleet-")
        try:
            con.execute("SET temp_directory = ?", [scratch]).fetchall()
            if self.memory_limit is not None:
                con.execute("SET memory_limit = ?", [self.memory_limit]).fetchall()
            for table in PARTITIONED:
                raw = f"raw_{table}"
                con.read_parquet(_files(partitions, table), filename=True).create_view(raw)
                con.execute(statements("threadwise.analyze", "fleet_bind.sql")["partitioned"].format(
                    table=identifier(table, PARTITIONED), raw=identifier(raw, {raw})))
            # the capture rows carry their own host column: read without the partition's
            con.read_parquet(_files(partitions, "capture")).create_view("capture")
            con.register("fleet_group", groups.to_arrow())
            results: dict[str, pl.DataFrame] = {}
            for name in STATEMENTS:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
                    table = con.execute(feature_sql(name)).to_arrow_table()
                results[name] = pl.DataFrame(pl.from_arrow(table))
                con.register(name, table)
            return _tables(results)
        finally:
            con.close()
            shutil.rmtree(scratch, ignore_errors=True)


class SparkEngine:
    """The fleet's features on Apache Spark: `local[N]` on this machine, or a cluster's URL."""

    name = "spark"

    def __init__(self, master: str = SPARK_MASTER, memory: str = SPARK_MEMORY) -> None:
        self.master = master
        self.memory = memory

    def session(self) -> Any:
        """The Spark session (started at the first call: a JVM, seconds)."""
        try:
            # deferred: pyspark starts a JVM; only the Spark engine needs it
            from pyspark.sql import SparkSession
        except ImportError:
            raise MissingTool("the Spark engine needs pyspark",
                              hint="./scripts/setup-python.sh installs it (requirements.lock)") from None
        return (SparkSession.builder.master(self.master).appName("threadwise-fleet")
                .config("spark.ui.enabled", "false")
                .config("spark.log.level", "ERROR")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.memory", self.memory)
                # a fleet's group tables are small: 200 shuffle partitions would be 200 tiny tasks
                .config("spark.sql.shuffle.partitions", "8")
                # host and capture are names, never numbers or dates
                .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
                .getOrCreate())

    def features(self, partitions: list[Path], groups: pl.DataFrame) -> FleetTables:
        spark = self.session()
        for table in PARTITIONED:
            (spark.read.option("basePath", _base(partitions)).parquet(*_files(partitions, table))
             .createOrReplaceTempView(table))
        # the capture rows carry their own host column: read without partition discovery
        (spark.read.option("recursiveFileLookup", "true").parquet(*_files(partitions, "capture"))
         .createOrReplaceTempView("capture"))
        spark.createDataFrame(groups.to_arrow()).createOrReplaceTempView("fleet_group")
        results: dict[str, pl.DataFrame] = {}
        for name in STATEMENTS:
            frame = spark.sql(spark_sql(name)).cache()
            frame.createOrReplaceTempView(name)
            results[name] = pl.DataFrame(pl.from_arrow(frame.toArrow()))
        return _tables(results)


def engine(name: str, *, master: str | None = None) -> Engine:
    """The engine called `name` (`duckdb` or `spark`; `master` is Spark's, default local[2])."""
    if name == "duckdb":
        if master is not None:
            raise UsageError("--spark-master is for --engine spark", hint="drop it, or add --engine spark")
        return DuckDBEngine()
    if name == "spark":
        return SparkEngine(master or SPARK_MASTER)
    raise UsageError(f"unknown engine {name!r}", hint=f"one of: {', '.join(ENGINES)}")
