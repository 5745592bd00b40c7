"""Benchmark: tracer records -> finished capture (raw tables and finalize.sql's derived tables).

Problem: a capture must be ready at least as fast as the tracer records (issue 10 item 4: at
least 2M events/s end to end, at most 2 GB peak RSS), and the only honest way to know is to
time the real path, records.py's decoder -> CaptureWriter -> finalize.sql, on files shaped
like a real capture, at sizes where the costs show.
Approach: tests/synthetic/records_gen.py writes the libbpf tracer's four record files (4 CPUs with consistent
switch chains, wakings, migrations, births, exits, a reused tid, renames) at each size. A
child process then builds the capture from them and reports its phases; the parent takes that
child's peak RSS from os.wait4. `--baseline` also times the path as it was before issue 10
(256 MB reads, an INSERT and a CHECKPOINT per read, the ASOF-join finalize kept in
tests/observe/fixtures/finalize_asof.sql) in the same run, interleaved, so the two are compared
under the same load. `--bound` adds a third way, `noraw`: the new path with the two big raw
tables (switches, wakings) kept in memory as temporary tables, so the capture stores only the
derived tables. It is not a capture anyone should ship (it loses the raw events), but it
measures how fast a build could be if the contract stored no raw events: the answer to "would
storing fewer rows reach the target?". Events/s is events / (first read -> file renamed into
place).

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/ingest.py --baseline --bound --write-results
    .venv/bin/python benchmarks/ingest.py --sizes 200000        # a quick look
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/synthetic
sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, beside this script

from results import child, stamp, write_section

from tests.synthetic.records_gen import TARGET_TGID, write_records

TARGET_EVENTS_PER_S = 2_000_000
TARGET_RSS_MB = 2048.0
REFERENCE_SQL = Path(__file__).resolve().parents[1] / "tests" / "observe" / "fixtures" / "finalize_asof.sql"
# the raw tables the `noraw` way keeps in memory: 99% of a capture's raw rows
IN_MEMORY_RAW = ("raw_sched_switch", "raw_sched_waking")
WAYS = ("old", "new", "noraw")
COUNTED = {"switch": "raw_sched_switch", "waking": "raw_sched_waking", "migrate": "raw_sched_migrate",
           "new": "raw_task_new", "exit": "raw_task_exit", "rename": "raw_task_rename"}


def build_capture(records: Path, out: Path, *, way: str = "new", threads: int = 0) -> dict[str, float]:
    """The capture of the record files in `records` (written by records_gen), built `way`:
    "new" (observe.ingest + finalize.sql), "old" (the pre-issue-10 path) or "noraw" (new, with
    the big raw tables in memory: the bound if no raw events were stored). `threads` > 0 sets
    DuckDB's threads (default: one per core). Phase seconds."""
    from threadwise.observe.ingest import ingest_records
    from threadwise.observe.records import RecordReader
    from threadwise.observe.store import EVENT_TABLES, SCHEMA_VERSION, CaptureMeta, CaptureWriter, TracerCount
    from threadwise.topology import synthetic_topology

    if way not in WAYS:
        raise ValueError(f"way {way!r}: one of {', '.join(WAYS)}")
    old = way == "old"          # else the shipped path (noraw: with the big raw tables in memory)
    meta = json.loads((records / "meta.json").read_text())
    began = time.monotonic()
    writer = CaptureWriter(out, force=True)
    if threads:
        writer.con.execute(f"SET threads = {int(threads)}")
    if way == "noraw":
        for table in IN_MEMORY_RAW:     # the same columns, in a temporary table finalize.sql reads
            ddl = writer.con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = ?",
                                     [table]).fetchall()[0][0]
            writer.con.execute(f"DROP TABLE {table}")
            writer.con.execute(ddl.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
    reader = RecordReader(records)
    if old:
        while parts := reader.read():          # as capture.py's loop did: one INSERT per batch
            for table, batches in parts.items():
                for batch in batches:
                    writer.append(table, batch)
            writer.checkpoint()
    else:
        ingest_records(reader, writer)
    ingested = time.monotonic()
    writer.insert("cpu_topology", synthetic_topology(meta["nr_cpus"]))
    writer.insert("tracer_counts", [TracerCount(name, writer.rows[table], writer.rows[table], 0)
                                    for name, table in COUNTED.items()])
    events = sum(writer.rows[table] for table in EVENT_TABLES)
    writer.insert("capture", [CaptureMeta(
        capture_id=str(uuid.uuid4()), schema_version=SCHEMA_VERSION, host="records_gen",
        kernel_release="synthetic", start_wall=dt.datetime.now(dt.UTC).replace(tzinfo=None),
        start_ts=meta["start_ts"], end_ts=meta["end_ts"], duration_ns=meta["end_ts"] - meta["start_ts"],
        target_kind="pid", target_spec=str(TARGET_TGID), target_tgids=[TARGET_TGID],
        tracer_backend="libbpf", tracer_version="records_gen", events_recorded=events, events_lost=0,
        loss_detail="synthetic: none", end_reason="duration")])
    if old:
        writer.con.execute(REFERENCE_SQL.read_text())
        writer.con.execute("CHECKPOINT")
        writer.con.close()
        os.replace(writer.temp_path, writer.final_path)
    else:
        writer.finalize()
    done = time.monotonic()
    return {"events": events, "ingest_s": ingested - began, "finalize_s": done - ingested,
            "total_s": done - began}


def generate(directory: Path, events: int, *, seed: int = 0) -> dict[str, int]:
    """Record files of about `events` events in `directory`, with the meta.json build_capture reads."""
    info = write_records(directory, events=events, seed=seed)
    (directory / "meta.json").write_text(json.dumps(info))
    # The files are written back before any build is timed: a tracer writes its records over the
    # capture's duration, so a build never starts with hundreds of MB of them still to flush
    # (the first build after generating paid that: 5.3 s against 4.8 s at 10M).
    os.sync()
    return info


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="events per capture, comma-separated")
    parser.add_argument("--baseline", action="store_true", help="also time the pre-issue-10 path")
    parser.add_argument("--bound", action="store_true",
                        help="also time `noraw`: the big raw tables in memory (the bound if a capture "
                             "stored no raw events)")
    parser.add_argument("--threads", type=int, default=0,
                        help="DuckDB threads for the builds (default: one per core); 1 shows the "
                             "build's CPU work as wall time")
    parser.add_argument("--rounds", type=int, default=1, help="builds per size and way (interleaved)")
    parser.add_argument("--out", type=Path, help="directory for records and captures (default: temp)")
    parser.add_argument("--write-results", action="store_true", help="write benchmarks/RESULTS.md")
    parser.add_argument("--child", nargs=3, metavar=("RECORDS", "OUT", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads < 0:
        parser.error(f"--threads {args.threads}: give 1 or more, or 0 for DuckDB's default")
    return args


def main() -> int:
    args = _arguments()
    if args.child:
        records, out, way = args.child
        print(json.dumps(build_capture(Path(records), Path(out), way=way, threads=args.threads)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",") if s]
    ways = (["old"] if args.baseline else []) + ["new"] + (["noraw"] if args.bound else [])
    header = stamp("flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/ingest.py "
                   + " ".join(sys.argv[1:]))
    workdir = Path(tempfile.mkdtemp(prefix="tw-ingest-", dir=args.out))
    rows: list[dict] = []
    try:
        for size in sizes:
            records = workdir / f"records-{size}"
            info = generate(records, size)
            size_mb = sum(f.stat().st_size for f in records.glob("*.bin")) / 2**20
            for rnd in range(args.rounds):
                for way in ways:
                    row = _build(records, workdir / f"capture-{size}-{way}.duckdb", way, size=size,
                                 threads=args.threads)
                    if row is None:
                        return 1
                    rows.append({"size": size, "way": way, "round": rnd + 1, "mb": size_mb,
                                 "switches": info["switch.bin"], **row})
                    _say(rows[-1])
            shutil.rmtree(records, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.write_results:
        print(f"wrote {write_section('ingest', chr(10).join(_results(header, rows, sizes, ways)))}")
    return 0


def _build(records: Path, capture: Path, way: str, *, size: int, threads: int) -> dict | None:
    """One build of `records` into `capture` the named way, in its own child: its phases, rate, peak
    RSS, wall and the load as it ended (None: the child failed, said on stderr)."""
    argv = [sys.executable, __file__, "--child", str(records), str(capture), way, "--threads", str(threads)]
    wall, rss, code, out = child(argv)
    if code != 0:
        print(f"build failed ({way}, {size}): exit {code}", file=sys.stderr)
        return None
    capture.unlink(missing_ok=True)
    phases = json.loads(out.strip().splitlines()[-1])
    return {"rss": rss, "wall": wall, "rate": phases["events"] / phases["total_s"],
            "load": os.getloadavg()[0], **phases}


def _say(row: dict) -> None:
    print(f"{row['way']:5} {row['events']:>11,} events ({row['mb']:,.0f} MB of records): "
          f"{row['total_s']:6.2f} s (ingest {row['ingest_s']:.2f}, finalize "
          f"{row['finalize_s']:.2f}) = {row['rate'] / 1e6:.2f} M events/s, peak RSS "
          f"{row['rss']:,.0f} MB, child wall {row['wall']:.2f} s, load {row['load']:.1f}", flush=True)


def _results(header: str, rows: list[dict], sizes: list[int], ways: list[str]) -> list[str]:
    """RESULTS.md's section: every build, then the median per size and way against the target."""
    lines = [
        "## Ingest: tracer records -> finished capture (issue 10, item 4)", "", header,
        f"Target: >= {TARGET_EVENTS_PER_S / 1e6:.0f}M events/s end to end, <= {TARGET_RSS_MB:,.0f} MB "
        "peak RSS. `new` = observe/ingest.py + observe/sql/finalize.sql; `old` = the path before "
        "issue 10 (256 MB reads, an INSERT + CHECKPOINT per read, the ASOF-join finalize in "
        "tests/observe/fixtures/finalize_asof.sql), run interleaved with `new` on the same files; "
        "`noraw` = `new` with raw_sched_switch and raw_sched_waking kept in memory (temporary "
        "tables): not a shippable capture, the bound for one that stored no raw events. "
        "Records: tests/synthetic/records_gen.py, 4 CPUs. Time is first read -> capture renamed into "
        "place, inside the child; peak RSS is the child's (os.wait4).", "",
        "| events | switches | records MB | way | round | ingest s | finalize s | total s | "
        "events/s | peak RSS MB | load (1 min) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['events']:,} | {r['switches']:,} | {r['mb']:,.0f} | {r['way']} | {r['round']} | "
              f"{r['ingest_s']:.2f} | {r['finalize_s']:.2f} | {r['total_s']:.2f} | "
              f"{r['rate'] / 1e6:.2f}M | {r['rss']:,.0f} | {r['load']:.1f} |" for r in rows]
    lines += ["", "Median over the rounds (range), against the target:", ""]
    for size in sizes:
        for way in ways:
            rates = sorted(r["rate"] for r in rows if r["size"] == size and r["way"] == way)
            peak = max(r["rss"] for r in rows if r["size"] == size and r["way"] == way)
            verdict = ("meets" if statistics.median(rates) >= TARGET_EVENTS_PER_S
                       and peak <= TARGET_RSS_MB else "misses")
            lines.append(f"- {size:,} events, {way}: {statistics.median(rates) / 1e6:.2f}M events/s "
                         f"({rates[0] / 1e6:.2f}-{rates[-1] / 1e6:.2f}M), peak RSS {peak:,.0f} MB: "
                         f"{verdict} the target")
    return lines


if __name__ == "__main__":
    sys.exit(main())
