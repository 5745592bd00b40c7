"""Benchmark: a fleet's features (fleet_features.sql) on DuckDB and on Spark local[2], by fleet size.

Problem: issue 53 item 5. DuckDB is the default engine, Spark the one for fleets past one machine;
a user needs to know where one overtakes the other, and where this machine stops.
Approach: one synthetic capture of SWITCHES sched_switch events (tests/synthetic/bulk.py, written
through observe's writer and finalize.sql, as a live capture is) is analyzed once (the group map)
and exported as Parquet once. A fleet of K captures is K partitions, 5 captures a host, whose
sched_slice and thread_wait files are hard links to that export and whose capture.parquet carries
its own capture id; so a fleet grows without generating or storing its events again. After the
first read the files come from the page cache, for both engines alike. Each engine runs in a
child process of its own (a fresh DuckDB, a fresh JVM; peak RSS from wait4) over the same tree,
in alternating order from size to size. Reported: the features' time inside the child (Spark's
JVM start is in the wall time only), events (every sched_slice row of the fleet) per second, and
peak RSS (Spark's: the Python driver's plus its JVM's high-water mark).

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/fleet.py --write-results
    .venv/bin/python benchmarks/fleet.py --captures 1,4 --switches 1000000     # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/synthetic
sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, beside this script

from results import child, stamp, write_section

DEFAULT_CAPTURES = "1,4,10,25,50,100"
CAPTURES_PER_HOST = 5
LINKED = ("sched_slice", "thread_wait")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--captures", default=DEFAULT_CAPTURES, help="fleet sizes, in captures")
    parser.add_argument("--switches", type=int, default=10_000_000, help="sched_switch events per capture")
    parser.add_argument("--engines", default="duckdb,spark", help="engines to run")
    parser.add_argument("--spark-max-captures", type=int, default=25,
                        help="Spark only up to this fleet size (local[2] read 0.30-0.82M events/s here, "
                             "2026-12-05; at 1B, 100 captures, it ran out of its 4 GB heap after 18 minutes)")
    parser.add_argument("--out", type=Path, help="directory for the generated fleet (default: a temp dir)")
    parser.add_argument("--write-results", action="store_true", help="write benchmarks/RESULTS.md")
    parser.add_argument("--section", default="fleet",
                        help="RESULTS.md section to write (another name keeps the first run's table)")
    parser.add_argument("--run-engine", nargs=3, metavar=("ENGINE", "TREE", "MAP"), help=argparse.SUPPRESS)
    return parser.parse_args()


def run_engine(name: str, tree: Path, groups_file: Path) -> None:
    """(child) One engine over every partition of `tree`; prints seconds and row counts as JSON."""
    import polars as pl
    import pyarrow.parquet as pq

    from threadwise.analyze.fleet_engine import SparkEngine, engine

    partitions = sorted(tree.glob("host=*/capture=*"))
    events = sum(pq.read_metadata(p / "sched_slice.parquet").num_rows for p in partitions)
    groups = pl.read_parquet(groups_file)
    chosen = engine(name)
    jvm_pid = None
    if isinstance(chosen, SparkEngine):   # the JVM's start is not the features' time
        jvm_pid = chosen.session().sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    began = time.monotonic()
    tables = chosen.features(partitions, groups)
    seconds = time.monotonic() - began
    jvm_mb = None
    if jvm_pid is not None:   # the JVM is Spark's memory, not this process's: its own high-water mark
        status = Path(f"/proc/{jvm_pid}/status").read_text()
        jvm_mb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024
    print(json.dumps({"seconds": seconds, "events": events, "threads": tables.threads.height,
                      "groups": tables.captures.height, "jvm_mb": jvm_mb}))


def seed_capture(workdir: Path, switches: int) -> tuple[Path, object]:
    """The one generated capture's Parquet partition, and its group map (utid -> pattern)."""
    from tests.synthetic.bulk import bulk_capture
    from threadwise.analyze import analyze_capture
    from threadwise.observe.interop.parquet import export_parquet

    capture = bulk_capture(workdir / "seed.duckdb", switches=switches)
    threads = analyze_capture(capture).threads
    grouped = threads.filter(threads["group"].is_not_null()).select("utid", "group")
    seed = export_parquet(capture, workdir / "seed-tree", host="seed")
    capture.unlink()
    return seed.directory, grouped


def grow(tree: Path, seed: Path, grouped: object, captures: int) -> Path:
    """Add partitions to `tree` until it holds `captures`; returns the group map file for all."""
    import polars as pl
    import pyarrow.parquet as pq

    row = pq.read_table(seed / "capture.parquet")
    for number in range(captures):
        host, capture_id = f"host-{number // CAPTURES_PER_HOST:03d}", f"capture-{number:04d}"
        partition = tree / f"host={host}" / f"capture={capture_id}"
        if partition.exists():
            continue
        partition.mkdir(parents=True)
        for table in LINKED:
            os.link(seed / f"{table}.parquet", partition / f"{table}.parquet")
        pq.write_table(row.set_column(row.schema.get_field_index("capture_id"), "capture_id",
                                      [[capture_id] * row.num_rows]), partition / "capture.parquet")
    frames = [grouped.select(pl.lit(f"host-{n // CAPTURES_PER_HOST:03d}").alias("host"),  # type: ignore[attr-defined]
                             pl.lit(f"capture-{n:04d}").alias("capture"), pl.col("utid").cast(pl.Int64),
                             pl.col("group").alias("pattern")) for n in range(captures)]
    groups_file = tree.parent / f"groups-{captures}.parquet"
    pl.concat(frames).write_parquet(groups_file)
    return groups_file


def main() -> int:
    args = _arguments()
    if args.run_engine:
        run_engine(args.run_engine[0], Path(args.run_engine[1]), Path(args.run_engine[2]))
        return 0
    sizes = [int(s) for s in args.captures.split(",") if s]
    engines = [e for e in args.engines.split(",") if e]
    header = stamp("flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/fleet.py "
                   + " ".join(a for a in sys.argv[1:]))
    workdir = Path(tempfile.mkdtemp(prefix="tw-fleet-bench-", dir=args.out))
    began = time.monotonic()
    seed, grouped = seed_capture(workdir, args.switches)
    print(f"seed capture: {args.switches:,} switches, generated, analyzed and exported in "
          f"{time.monotonic() - began:.1f} s", flush=True)
    rows: list[dict[str, object]] = []
    for index, captures in enumerate(sizes):
        tree = workdir / f"fleet-{captures}" / "tree"
        tree.mkdir(parents=True, exist_ok=True)
        groups_file = grow(tree, seed, grouped, captures)
        for name in engines if index % 2 == 0 else engines[::-1]:
            if name == "spark" and captures > args.spark_max_captures:
                continue
            wall, rss, code, out = child([sys.executable, __file__, "--run-engine", name, str(tree),
                                          str(groups_file)])
            result = json.loads(out.strip().splitlines()[-1]) if code == 0 and out.strip() else {}
            row = {"captures": captures, "engine": name, "wall": wall, "rss": rss, "code": code, **result}
            rows.append(row)
            rate = (f"{result['events'] / result['seconds'] / 1e6:.2f}M events/s" if result else "failed")
            if result.get("jvm_mb"):
                row["rss"] = rss = rss + result["jvm_mb"]   # the Python driver and its JVM
            print(f"{captures} captures ({-(-captures // CAPTURES_PER_HOST)} hosts), {name}: "
                  f"{result.get('seconds', float('nan')):.1f} s features, {wall:.1f} s wall, {rate}, "
                  f"{rss:,.0f} MB peak RSS, exit {code}", flush=True)
    table = _table(rows)
    print(table)
    if args.write_results:
        title = "DuckDB against Spark local[2]" if args.section == "fleet" else args.section
        write_section(args.section, f"## Fleet features: {title}\n\n{header}\n{table}")
    return 0


def _table(rows: list[dict[str, object]]) -> str:
    lines = ["| captures | hosts | events (sched_slice rows) | engine | features s | wall s | events/s | "
             "peak RSS MB | exit |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = r["code"] == 0 and "events" in r
        events = f"{r['events']:,}" if ok else "-"
        rate = f"{r['events'] / r['seconds'] / 1e6:.2f}M" if ok else "failed"  # type: ignore[operator]
        seconds = f"{r['seconds']:.1f}" if ok else "-"
        hosts = -(-int(r["captures"]) // CAPTURES_PER_HOST)  # type: ignore[call-overload]
        # a failed Spark child reports no JVM high-water mark: its driver's RSS alone would mislead
        rss = "-" if not ok and r["engine"] == "spark" else f"{r['rss']:,.0f}"
        lines.append(f"| {r['captures']} | {hosts} | {events} | {r['engine']} | {seconds} | "
                     f"{r['wall']:.1f} | {rate} | {rss} | {r['code']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
