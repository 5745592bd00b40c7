"""The lab ladder's noise floor: the default scheduler against itself (A/A), per background level.

Every verdict threadwise prints rests on this: a profile is called better or worse
at a level only when its ratio CI clears 1 by more than identical arms spread.
This runs one A/A ladder (two baseline arms, interleaved ABBA) and prints, per
level and metric, the ratio of medians of the two identical arms with its
bootstrap 95% CI, the CI's width, and the resulting noise floor (the largest
|bound - 1|). In the lab the figures are taken under TCG; they say how large an
effect the lab can show at this many repeats, not how noisy real hardware is.

    flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/ladder_noise.py \
        --workload rolesim --lab --repeats 3 --levels 0,1,2,4 --write-results

`--write-results` replaces the `ladder_noise` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from results import stamp, write_section

from threadwise.refine import judge, store
from threadwise.refine.ladder import BASELINE, Arm
from threadwise.refine.run import run_ladder, where
from threadwise.refine.workload import load_workload, resolve_workload


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
    parser.add_argument("--write-results", action="store_true", help="write benchmarks/RESULTS.md")
    args = parser.parse_args()
    header = stamp("flock /tmp/threadwise-bench.lock .venv/bin/python benchmarks/ladder_noise.py "
                   + " ".join(sys.argv[1:]))

    path = resolve_workload(args.workload)
    workload = load_workload(path).with_window(args.window)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    levels = [int(v) for v in args.levels.split(",")]
    started = time.monotonic()
    result = run_ladder(workload, path.read_text(), [Arm(BASELINE), Arm("baseline-aa")],
                        ladder_file=args.output, place=where(args.lab, args.cpus), levels=levels,
                        repeats=args.repeats, seed=args.seed, purpose="aa",
                        command="benchmarks/ladder_noise.py", progress=lambda _line: None)
    con = store.open_ladder(args.output)
    try:
        comparison = judge.judge(con, result.run_id, BASELINE, "baseline-aa")
        info = store.run_info(con, result.run_id)
    finally:
        con.close()
    where_text = (f"TCG, {args.cpus}-vCPU lab VM on {platform.node()} ({platform.release()})" if args.lab
                  else f"this host ({platform.release()})")
    lines = [f"A/A ladder of {workload.name}: {args.repeats} repeats, "
             f"{workload.objective.window_s:g} s windows, "
             f"{where_text}; {result.ingested.valid} of {result.ingested.cells} cells valid; "
             f"{time.monotonic() - started:.0f} s", "",
             "| metric | bg | ratio of medians | 95% CI | CI width |",
             "|---|---:|---:|---|---:|"]
    for c in (*comparison.primary, *comparison.secondary):
        width = c.ci_high - c.ci_low
        lines.append(f"| {c.metric} | {c.level} | {c.ratio:.3f} | [{c.ci_low:.3f}, {c.ci_high:.3f}] "
                     f"| {width:.3f} |")
    floor = max((max(abs(c.ci_low - 1), abs(c.ci_high - 1)) for c in comparison.primary
                 if c.n_reference >= 2 and c.n_candidate >= 2), default=float("nan"))
    lines += ["", f"Noise floor ({info.primary[0]}): {floor:.3f}: the largest distance of an A/A "
              f"bound from 1 (data: {args.output}, run {result.run_id})."]
    print("\n".join(lines))
    if args.write_results:
        body = "\n".join(["## The lab ladder's noise floor (issue 9, A/A)", "", header, *lines])
        print(f"wrote {write_section('ladder_noise', body)}")


if __name__ == "__main__":
    main()
