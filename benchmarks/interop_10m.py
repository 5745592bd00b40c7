"""Benchmark: `threadwise export --format perfetto` and `threadwise import` on a 10M-switch capture.

Problem: export and import must stream (bounded memory) and keep up with
captures of tens of millions of events; the figures that say so are events/s
and peak RSS of each command.
Approach: tests/synthetic/bulk.py generates the capture (10M sched_switch plus the wakings its
thread classes imply) in a child process; the real CLI then exports it to a
Perfetto trace and imports that trace back, each in its own child, so each
peak RSS (os.wait4) is that command's alone. The import is checked to give back
as many events as were exported. With `--perf-data FILE` a perf.data recording
is imported too (perf script's own time included).

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/interop_10m.py --write-results
    .venv/bin/python benchmarks/interop_10m.py --events 1000000 --perf-data perf.data --perf-comm hackbench
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/synthetic
sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, beside this script

from results import CLI, stamp, write_section
from results import child as run_child  # benchmarks/results.py: one measured child, its own RSS

from tests.synthetic.bulk import BULK_TGID, bulk_capture


def _events(text: str) -> int:
    match = re.search(r"([\d,]+) events", text)
    if match is None:
        raise SystemExit(f"no event count in: {text}")
    return int(match.group(1).replace(",", ""))


class _Failed(Exception):
    """A measured step failed (a command's exit status, or the import's count): what to show."""


def _measured(argv: list[str]) -> tuple[float, float, str]:
    """One command as its own child: wall s, peak RSS MB, output; a failure raises _Failed."""
    wall, rss, code, out = run_child(argv)
    if code != 0:
        raise _Failed(out)
    return wall, rss, out


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000, help="sched_switch events to generate")
    parser.add_argument("--out", type=Path, help="directory for the files (default: a temp dir)")
    parser.add_argument("--perf-data", type=Path, help="also import this perf.data (perf sched record)")
    parser.add_argument("--perf-comm", default="hackbench", help="--comm for the perf.data import")
    parser.add_argument("--write-results", action="store_true",
                        help="write its section of benchmarks/RESULTS.md")
    parser.add_argument("--generate-only", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    if args.generate_only:
        timings: dict[str, float] = {}
        bulk_capture(args.generate_only, switches=args.events, timings=timings)
        print(json.dumps(timings))
        return 0

    started_as = " ".join(["flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/interop_10m.py",
                           *sys.argv[1:]])
    stamped = stamp(started_as)   # date and load average as the run starts
    workdir = Path(tempfile.mkdtemp(prefix="tw-interop-bench-", dir=args.out))
    try:
        lines = _rows(args, workdir)
    except _Failed as failed:
        print(failed.args[0], file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.write_results:
        write_section("interop_10m", "\n".join([
            "## Interop: Perfetto export and import (issue 12)", "",
            stamped,
            f"The capture is tests/synthetic/bulk.py's ({args.events:,} sched_switch plus the wakings of its "
            "thread classes). Each command runs as its own child process (the real CLI); peak RSS is that "
            "child's (os.wait4). Events counted as each command reports them; the import gave back as "
            "many events as were exported. Single runs on a shared 2-core machine.", "",
            "| step | events | wall s | events/s | peak RSS MB | output |",
            "|---|---|---|---|---|---|", *lines]))
    return 0


def _rows(args: argparse.Namespace, workdir: Path) -> list[str]:
    """Generate the capture, export it, import it back (and the perf.data if given): one table row
    per command, each printed as it is measured."""
    capture, trace, back = workdir / "bulk.duckdb", workdir / "bulk.pftrace", workdir / "back.duckdb"
    wall, rss, _ = _measured([sys.executable, __file__, "--events", str(args.events),
                              "--generate-only", str(capture)])
    print(f"generate  {args.events:,} switches: {wall:.1f} s wall, peak RSS {rss:,.0f} MB "
          f"(capture {capture.stat().st_size / 1e6:,.0f} MB)")
    lines: list[str] = []

    wall, rss, out = _measured([*CLI, "export", str(capture), "--format", "perfetto", "-o", str(trace)])
    exported = _events(out)
    lines.append(f"| export (capture -> Perfetto) | {exported:,} | {wall:.1f} | {exported / wall:,.0f} | "
                 f"{rss:,.0f} | {trace.stat().st_size / 1e6:,.0f} MB trace |")
    print(lines[-1])

    wall, rss, out = _measured([*CLI, "import", str(trace), "--pid", str(BULK_TGID), "-o", str(back)])
    imported = _events(out)
    if imported != exported:
        raise _Failed(f"import gave {imported:,} events, export wrote {exported:,}")
    lines.append(f"| import (Perfetto -> capture, finalize.sql included) | {imported:,} | {wall:.1f} | "
                 f"{imported / wall:,.0f} | {rss:,.0f} | {back.stat().st_size / 1e6:,.0f} MB capture |")
    print(lines[-1])

    if args.perf_data:
        lines.append(_perf_row(args.perf_data, args.perf_comm, workdir / "perf.duckdb"))
        print(lines[-1])
    return lines


def _perf_row(perf_data: Path, comm: str, perf_back: Path) -> str:
    """The perf.data import's row, naming the command perf recorded (from its header)."""
    wall, rss, out = _measured([*CLI, "import", str(perf_data), "--comm", comm, "-o", str(perf_back)])
    events = _events(out)
    header = subprocess.run(["perf", "report", "--header-only", "-i", str(perf_data)],
                            capture_output=True, text=True, check=False).stdout
    recorded = next((line.split(":", 1)[1].strip() for line in header.splitlines()
                     if line.startswith("# cmdline")), "unknown")
    return (f"| import (perf.data via perf script) | {events:,} | {wall:.1f} | {events / wall:,.0f} | "
            f"{rss:,.0f} | {perf_data.stat().st_size / 1e6:,.0f} MB perf.data of `{recorded}` |")


if __name__ == "__main__":
    sys.exit(main())
