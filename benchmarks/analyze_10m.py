"""Benchmark: `threadwise analyze` on a synthetic capture of 10 million sched_switch events.

Target (issue 3): at most 15 s wall and 2 GB peak RSS on a 2-core host.

Generation (tests/synthetic/bulk.py: numpy, whole arrays, through observe's capture builder and
finalize.sql) and analysis each run in their own child process, so each one's
peak RSS comes from os.wait4 for exactly that child. The analysis is the real
CLI, including storing the analysis_* tables (`--store`: beside the capture since
issue 21, inside it before).

    .venv/bin/python benchmarks/analyze_10m.py                 # generate + analyze, then delete
    .venv/bin/python benchmarks/analyze_10m.py --keep --out /tmp/bench
    .venv/bin/python benchmarks/analyze_10m.py --reuse /tmp/bench/bulk-10000000.duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/synthetic
sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, beside this script

from results import CLI, child  # benchmarks/results.py, beside this script

TARGET_S = 15.0
TARGET_RSS_MB = 2048.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000, help="sched_switch events to generate")
    parser.add_argument("--out", type=Path, help="directory for the capture (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated capture")
    parser.add_argument("--reuse", type=Path, help="analyze this existing capture instead of generating")
    parser.add_argument("--generate-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate_only:
        from tests.synthetic.bulk import generate_and_report  # numpy only in the child

        generate_and_report(args.generate_only, args.events)
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="tw-bench-", dir=args.out)) if not args.reuse else None
    capture = args.reuse or (workdir / f"bulk-{args.events}.duckdb")  # type: ignore[operator]
    try:
        if not args.reuse:
            wall, rss, code, out = child([sys.executable, __file__, "--events", str(args.events),
                                          "--generate-only", str(capture)])
            if code != 0:
                print(f"generation failed (exit {code})", file=sys.stderr)
                return 1
            phases = json.loads(out.strip().splitlines()[-1])
            print(f"generate  {args.events:,} switches: {wall:.1f} s wall, peak RSS {rss:,.0f} MB "
                  f"(ingest {phases['ingest_s']:.1f} s, observe finalize.sql {phases['finalize_s']:.1f} s)")
        wall, rss, code, _ = child([*CLI, "analyze", str(capture), "--store"])
        if code != 0:
            print(f"threadwise analyze failed (exit {code})", file=sys.stderr)
            return 1
        from threadwise.observe.summary import summarize

        switches = summarize(capture)["events_by_kind"]["switch"]
        ok = wall <= TARGET_S and rss <= TARGET_RSS_MB
        print(f"analyze   {switches:,} switches: {wall:.2f} s wall, {switches / wall:,.0f} events/s, "
              f"peak RSS {rss:,.0f} MB  [target <= {TARGET_S:.0f} s, <= {TARGET_RSS_MB:,.0f} MB: "
              f"{'met' if ok else 'MISSED'}]  (load average {os.getloadavg()[0]:.1f})")
        return 0
    finally:
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif workdir is not None:
            print(f"kept {capture}")


if __name__ == "__main__":
    sys.exit(main())
