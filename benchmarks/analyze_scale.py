"""Benchmark: `threadwise analyze` at 1M, 10M and 100M sched_switch events: time, peak RSS, growth.

Problem: issue 10 item 5 asks that analysis grow linearly with the capture and that 100M
events stay within 4 GB of memory, which holds only if DuckDB keeps to its memory limit
(spilling to disk beyond it) and nothing materializes a whole event table in Python.
Approach: bulk.py generates each capture (numpy, through observe's writer and finalize.sql)
in its own child process; the real CLI (`threadwise analyze CAPTURE --store`, storing the
analysis_* tables) runs in another child, and os.wait4 gives exactly that child's peak RSS. The growth
ratio compares each size's time per event with the smallest size's (1.0 = linear).

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/analyze_scale.py --write-results
    .venv/bin/python benchmarks/analyze_scale.py --sizes 1000000,10000000
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

from results import CLI, child, stamp, write_section

TARGET_RSS_MB = {100_000_000: 4096.0}
DEFAULT_SIZES = "1000000,10000000,100000000"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="sched_switch events per capture")
    parser.add_argument("--out", type=Path, help="directory for the captures (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated captures")
    parser.add_argument("--captures", type=Path,
                        help="reuse bulk-N.duckdb captures here (missing ones are generated, kept)")
    parser.add_argument("--write-results", action="store_true", help="write benchmarks/RESULTS.md")
    parser.add_argument("--generate-only", nargs=2, metavar=("PATH", "SWITCHES"), help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    if args.generate_only:
        from tests.synthetic.bulk import generate_and_report  # numpy only in the child

        generate_and_report(Path(args.generate_only[0]), int(args.generate_only[1]))
        return 0

    sizes = [int(s) for s in args.sizes.split(",") if s]
    header = stamp("flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/analyze_scale.py "
                   + " ".join(sys.argv[1:]))
    keep = args.keep or args.captures is not None
    workdir = args.captures or Path(tempfile.mkdtemp(prefix="tw-scale-", dir=args.out))
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, float]] = []
    try:
        for size in sizes:
            capture = workdir / f"bulk-{size}.duckdb"
            row = _measure(capture, size)
            if row is None:
                return 1
            rows.append(row)
            if not keep:
                capture.unlink(missing_ok=True)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")
    base = rows[0]
    for row in rows:
        row["growth"] = (row["wall"] / row["switches"]) / (base["wall"] / base["switches"])
        print(f"{row['switches']:>12,} switches: time per event x{row['growth']:.2f} of the smallest size")
    if args.write_results:
        print(f"wrote {write_section('analyze_scale', chr(10).join(_results(header, rows)))}")
    return 0


def _measure(capture: Path, size: int) -> dict[str, float] | None:
    """`threadwise analyze --store` on the capture of `size` switches (generated first unless it is
    there), each in its own child: its row, printed (None: a child failed, said on stderr)."""
    gen_wall = gen_rss = float("nan")
    phases = {"finalize_s": float("nan")}
    if not capture.exists():
        gen_wall, gen_rss, code, out = child([sys.executable, __file__, "--generate-only",
                                              str(capture), str(size)])
        if code != 0:
            print(f"generation of {size:,} failed (exit {code})", file=sys.stderr)
            return None
        phases = json.loads(out.strip().splitlines()[-1])
    from threadwise.observe.summary import summarize

    kinds = summarize(capture)["events_by_kind"]
    events = sum(kinds.values())
    load = os.getloadavg()[0]
    wall, rss, code, _ = child([*CLI, "analyze", str(capture), "--store"])
    if code != 0:
        print(f"threadwise analyze failed on {size:,} (exit {code})", file=sys.stderr)
        return None
    row = {"switches": kinds["switch"], "events": events, "wall": wall, "rss": rss,
           "gen_wall": gen_wall, "gen_rss": gen_rss, "finalize_s": phases["finalize_s"],
           "file_mb": capture.stat().st_size / 2**20, "load": load}
    limit = TARGET_RSS_MB.get(size)
    print(f"analyze {kinds['switch']:>12,} switches ({events:,} events, {row['file_mb']:,.0f} MB): "
          f"{wall:7.2f} s, peak RSS {rss:,.0f} MB"
          + (f" [<= {limit:,.0f} MB: {'met' if rss <= limit else 'MISSED'}]" if limit else "")
          + f"; generated in {gen_wall:.1f} s (finalize {phases['finalize_s']:.1f} s, peak RSS "
          f"{gen_rss:,.0f} MB); load {load:.1f}", flush=True)
    return row


def _results(header: str, rows: list[dict[str, float]]) -> list[str]:
    """RESULTS.md's section: one row per size."""
    lines = ["## Analyze at scale (issue 10, item 5)", "", header,
             "`threadwise analyze CAPTURE` (the real CLI, storing the analysis_* tables) on bulk.py "
             "captures (2 CPUs, 71 threads); time is the child's wall, peak RSS the child's "
             "(os.wait4). Growth: time per event relative to the smallest size (1.0 = linear; "
             "below 1 while start-up costs dominate). Target: 100M within 4,096 MB. Generation "
             "(bulk.py + finalize.sql) is listed for reference, not part of analyze; nan: the "
             "capture was generated by an earlier run (`--captures`).", "",
             "| switches | events | capture MB | analyze s | peak RSS MB | growth (time/event) | "
             "generate s (finalize s) | generate peak RSS MB | load (1 min) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['switches']:,} | {r['events']:,} | {r['file_mb']:,.0f} | {r['wall']:.2f} | "
              f"{r['rss']:,.0f} | {r['growth']:.2f} | {r['gen_wall']:.1f} ({r['finalize_s']:.1f}) | "
              f"{r['gen_rss']:,.0f} | {r['load']:.1f} |" for r in rows]
    return lines


if __name__ == "__main__":
    sys.exit(main())
