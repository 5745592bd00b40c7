"""The lab ladder's noise floor: the default scheduler against itself (A/A), per background level.

Every verdict threadwise prints rests on this: a profile is called better or worse
at a level only when its ratio CI clears 1 by more than identical arms spread.
This runs one A/A ladder (two baseline arms, interleaved ABBA) and prints, per
level and metric, the paired ratio of the two identical arms with its 95%
interval and verdict, and the per-metric floor the run measured (stats.floors:
the margin every verdict against this machine must clear). In the lab the
figures are taken under TCG; they say how large an effect the lab can show at
this many repeats, not how noisy real hardware is.

    flock /tmp/threadwise-bench.lock .venv/bin/python research/2026-12-host-noise/ladder_noise.py \
        --workload rolesim --lab --repeats 3 --levels 0,1,2,4 --write-results

`--write-results` replaces the `ladder_noise` section of this folder's RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...

from results import stamp, write_section

from threadwise.refine.measure import store
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.run import run_ladder, where
from threadwise.refine.measure.workload import load_workload, resolve_workload

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"  # this study's tables, not the product's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="rolesim")
    parser.add_argument("--levels", default="0,1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=None)
    parser.add_argument("--lab", action="store_true")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--output", type=Path, default=Path("build/bench/ladder_noise.duckdb"))
    parser.add_argument("--write-results", action="store_true", help="write this folder's RESULTS.md")
    args = parser.parse_args()
    header = stamp("flock /tmp/threadwise-bench.lock .venv/bin/python "
                   "research/2026-12-host-noise/ladder_noise.py " + " ".join(sys.argv[1:]))

    path = resolve_workload(args.workload)
    workload = load_workload(path).with_window(args.window)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    levels = [int(v) for v in args.levels.split(",")]
    started = time.monotonic()
    result = run_ladder(workload, path.read_text(), [Arm(BASELINE), Arm("baseline-aa")],
                        ladder_file=args.output, place=where(args.lab, args.cpus), levels=levels,
                        repeats=args.repeats, seed=args.seed, purpose="aa",
                        command="ladder_noise.py", progress=lambda _line: None)
    con = store.open_ladder(args.output, read_only=True)
    try:
        info = store.run_info(con, result.run_id)
    finally:
        con.close()
    comparison, floors = result.comparisons["baseline-aa"], result.floors
    where_text = (f"TCG, {args.cpus}-vCPU lab VM on {platform.node()} ({platform.release()})" if args.lab
                  else f"this host ({platform.release()})")
    lines = [f"A/A ladder of {workload.name}: {args.repeats} repeats, "
             f"{workload.objective.window_s:g} s windows, "
             f"{where_text}; {result.ingested.valid} of {result.ingested.cells} cells valid; "
             f"{time.monotonic() - started:.0f} s", "",
             "| metric | bg | paired ratio | 95% interval | verdict | floor at the run's repeats |",
             "|---|---:|---:|---|---|---:|"]
    for c in (*comparison.primary, *comparison.secondary):
        floor = floors.floor(c.metric, args.repeats, c.level)
        shown = "not measured" if floor is None else f"+-{math.expm1(floor):.1%}"
        lines.append(f"| {c.metric} | {c.level} | {c.ratio:.3f} | [{c.ci_low:.3f}, {c.ci_high:.3f}] "
                     f"| {c.verdict.value} | {shown} |")
    lines += ["", f"Per-metric A/A floors ({info.primary[0]} first; stats.floors, stored in the ladder "
              f"file's floor table: {args.output}, run {result.run_id}). Identical arms should read "
              "within_noise at every level."]
    print("\n".join(lines))
    if args.write_results:
        body = "\n".join(["## The lab ladder's noise floor (issue 9, A/A)", "", header, *lines])
        print(f"wrote {write_section('ladder_noise', body, RESULTS)}")


if __name__ == "__main__":
    main()
