"""The lab's measuring modes, side by side: A/A spread and a known effect, quiet and under bursty load.

Question (issue 22): which lab clock should ladders use? Multi-threaded TCG moves with
host load; qemu's instruction-counted clock (icount) is steady but shares one virtual
CPU's worth of instructions between the vCPUs (LAB.md). A mode is good when identical
arms agree (the A/A spread, what a verdict must beat) AND a known effect survives: the
committed rolesim profile gives `hot-0` an exclusive CPU, which keeps its rate flat
under background load while the default scheduler loses (LAB.md: 1.7x at bg=2, 2.6x
at bg=4).

Each run is one ladder with three arms, `baseline`, `baseline-aa` (the same default
scheduler again) and `exclusive` (artifacts/rolesim/rolesim.not-a-profile.toml for the lab shape), in ABBA
order, stored with everything else in one ladder file (`-o`, committed under
benchmarks/data/ as the calibration pool of benchmarks/calibration.py). `--host
loaded` runs benchmarks/hostburst.py's seeded bursts beside the VM. The summary per
level: A/A ratio spread of the paired cells, the effect (exclusive / baseline), and the
share of vCPU time the host denied (runtime/lab/hostload.py).

    flock /tmp/threadwise-bench.lock .venv/bin/python research/2026-12-host-noise/lab_modes.py \\
        --mode multi --host quiet --repeats 10 -o research/2026-12-host-noise/data/lab-pool.duckdb
    ... --mode icount-2 --host loaded --repeats 3 --levels 0,1,2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...

import numpy as np
from hostburst import BurstyLoad

from threadwise.refine.measure import store
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.run import arm_from_file, run_ladder, where
from threadwise.refine.measure.workload import load_workload, resolve_workload
from threadwise.runtime.lab.initramfs import ICOUNT_ENV

AA, EXCLUSIVE = "baseline-aa", "exclusive"


def summary(path: Path, run_id: int) -> list[str]:
    """Per level: paired A/A log-ratio spread, the effect, and the host's denied share."""
    con = store.open_ladder(path, read_only=True)
    try:
        info = store.run_info(con, run_id)
        metric = info.primary[0]
        rows = con.execute(
            "SELECT c.arm, c.level, c.repeat, s.value, "
            "c.host_wait_s / nullif(c.host_cpu_s + c.host_wait_s, 0) FROM cell c JOIN sample s "
            "USING (run_id, idx) WHERE c.run_id = ? AND c.valid AND s.metric = ?",
            [run_id, metric]).fetchall()
    finally:
        con.close()
    value = {(arm, level, rep): v for arm, level, rep, v, _ in rows}
    denied = [d for *_, d in rows if d is not None]
    lines = [f"| bg | A/A paired ratios (min-max) | {EXCLUSIVE}/baseline paired (median) | baseline median |",
             "|---:|---|---:|---:|"]
    for level in info.levels:
        reps = sorted({rep for arm, lv, rep in value if lv == level})
        aa = [value[(AA, level, r)] / value[(BASELINE, level, r)] for r in reps
              if (AA, level, r) in value and (BASELINE, level, r) in value
              and value[(BASELINE, level, r)] > 0]
        eff = [value[(EXCLUSIVE, level, r)] / value[(BASELINE, level, r)] for r in reps
               if (EXCLUSIVE, level, r) in value and (BASELINE, level, r) in value
               and value[(BASELINE, level, r)] > 0]
        base = [value[(BASELINE, level, r)] for r in reps if (BASELINE, level, r) in value]
        aa_text = f"{min(aa):.3f}-{max(aa):.3f} (n={len(aa)})" if aa else "-"
        eff_text = f"{np.median(eff):.3f} (n={len(eff)})" if eff else "-"
        lines.append(f"| {level} | {aa_text} | {eff_text} | {np.median(base):,.0f} |" if base else
                     f"| {level} | {aa_text} | {eff_text} | - |")
    if denied:
        lines.append(f"\nHost denied share per cell: median {np.median(denied):.3f}, "
                     f"max {max(denied):.3f} ({len(denied)} cells)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="multi", help="multi (multi-threaded TCG) or icount-N")
    parser.add_argument("--host", choices=("quiet", "loaded"), default="quiet")
    parser.add_argument("--levels", default="0,1,2,4")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", type=Path, default=Path("artifacts/rolesim/rolesim.not-a-profile.toml"))
    parser.add_argument("-o", "--output", type=Path, default=Path("build/bench/lab-modes.duckdb"))
    args = parser.parse_args()
    if args.mode != "multi":
        if not args.mode.startswith("icount-"):
            parser.error("--mode is multi or icount-N")
        os.environ[ICOUNT_ENV] = args.mode.removeprefix("icount-")
    command = "lab_modes.py " + " ".join(sys.argv[1:])
    path = resolve_workload("rolesim")
    workload = load_workload(path).with_window(args.window)
    place = where(True, 2)
    arms = [Arm(BASELINE), Arm(AA), arm_from_file(args.profile, place.shape, EXCLUSIVE)]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    levels = [int(v) for v in args.levels.split(",")]
    started = time.monotonic()
    load = BurstyLoad(seed=args.seed) if args.host == "loaded" else None
    if load is not None:
        load.__enter__()
    try:
        result = run_ladder(workload, path.read_text(), arms, ladder_file=args.output, place=place,
                            levels=levels, repeats=args.repeats, seed=args.seed,
                            purpose=f"lab-modes {args.mode} {args.host}", command=command,
                            keep_raw=Path("build/bench") / f"raw-{args.mode}-{args.host}-{int(time.time())}",
                            progress=lambda line: print(line, flush=True))
    finally:
        if load is not None:
            load.__exit__(None, None, None)
    print(f"\n{args.mode}, host {args.host}: run {result.run_id} in {args.output}, "
          f"{result.ingested.valid} of {result.ingested.cells} cells valid, "
          f"{time.monotonic() - started:.0f} s"
          + (f", {load.busy_s:.0f} process-s of host load" if load else ""))
    print("\n".join(summary(args.output, result.run_id)))


if __name__ == "__main__":
    main()
