"""Can the host's view of the guest take the host's noise out of a ladder's cells?

Problem: beside a busy host the rolesim A/A noise of a lab ladder is 8-13x a quiet host's
(docs/lab.md, runs 4-6 of the w10 calibration pool), while the share of its demand the host
denies the guest stays near 3%. Each cell also records what the host gave the guest's vCPU
threads while it ran (`cell.host_cpu_s`, their CPU time; `cell.host_wait_s`, their time waiting
on the host's run queues). If those explained a cell's metric, a regression on them (covariate
adjustment) could take the host's share of the noise out. It is only sound if the covariate does
not move with the arm: a scheduler that keeps a vCPU busier also changes what qemu asks of the
host, and an adjustment on such a covariate takes part of the effect out with the noise.

Approach: per run, level and metric, the slope of the log metric on a covariate (per wall second)
is fitted on the three baseline arms' cells (identical conditions, one intercept); every cell is
then adjusted to the baseline arms' mean covariate. Reported, raw and adjusted on each covariate
and on both: the A/A noise s of the judge's pairing (the standard deviation of the per-repeat log
ratios `baseline-aa` / `baseline`) and the known effect, the median per-repeat ratio `exclusive` /
`baseline` (hot-0 on a CPU of its own: 1.8-2.1x better at bg 2 in every run). An adjustment that
shrinks s but moves the known effect by more than its raw floor is not a guest-speed reference.

    .venv/bin/python research/2026-12-host-noise/host_covariate.py \
        --pool benchmarks/data/lab-calibration-w10.duckdb \
        --run 3 --run 4 --run 5 --run 6 [--write-results]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...

import numpy as np
from calibration import EFFECT_ARM, TWIN
from results import stamp, write_section

from threadwise.refine.measure import store
from threadwise.refine.measure.plan import AA_ARM, BASELINE

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"  # this study's tables, not the product's

METRICS = ("hot_chunks_per_s", "worker_lat_p99_us")
COVARIATES = {"raw": (), "cpu": ("host_cpu_s",), "wait": ("host_wait_s",),
              "both": ("host_cpu_s", "host_wait_s")}
BASELINES = (BASELINE, AA_ARM, TWIN)   # the default scheduler three times: identical conditions
CELLS = """
SELECT c.arm, c.repeat, c.host_cpu_s / c.wall_s AS host_cpu_s, c.host_wait_s / c.wall_s AS host_wait_s,
       ln(s.value) AS y
FROM cell c JOIN sample s USING (run_id, idx)
WHERE c.run_id = ? AND c.level = ? AND s.metric = ? AND c.valid AND s.value > 0
  AND c.host_cpu_s IS NOT NULL AND c.host_wait_s IS NOT NULL
"""


def adjusted(rows: list[tuple], covariates: tuple[str, ...]) -> dict[tuple[str, int], float]:
    """(arm, repeat) -> the cell's log metric at the baseline arms' mean covariate, the slope
    fitted on the baseline arms' cells alone."""
    names = ("arm", "repeat", "host_cpu_s", "host_wait_s", "y")
    cells = [dict(zip(names, row, strict=True)) for row in rows]
    if not covariates:
        return {(c["arm"], c["repeat"]): c["y"] for c in cells}
    y = np.array([c["y"] for c in cells])
    x = np.array([[c[name] for name in covariates] for c in cells])
    base = np.array([c["arm"] in BASELINES for c in cells])
    centre = x[base].mean(axis=0)
    design = np.column_stack([np.ones(base.sum()), x[base] - centre])
    beta, *_ = np.linalg.lstsq(design, y[base], rcond=None)
    fitted = y - (x - centre) @ beta[1:]
    return {(c["arm"], c["repeat"]): float(v) for c, v in zip(cells, fitted, strict=True)}


def log_ratios(values: dict[tuple[str, int], float], arm: str, reference: str) -> list[float]:
    repeats = sorted({r for a, r in values if a == arm} & {r for a, r in values if a == reference})
    return [values[(arm, r)] - values[(reference, r)] for r in repeats]


def pair_sd(ratios: list[float]) -> float:
    """The standard deviation of one pair's log ratio (NaN under 2 pairs)."""
    return float(np.std(ratios, ddof=1)) if len(ratios) > 1 else math.nan


def median_ratio(ratios: list[float]) -> float:
    """The median per-repeat ratio (NaN without pairs)."""
    return math.exp(float(np.median(ratios))) if ratios else math.nan


def table(pool: Path, runs: list[int]) -> str:
    con = store.open_ladder(pool, read_only=True)
    lines = ["| metric | run | bg | adjusted on | A/A s (pairs) | exclusive / baseline |",
             "|---|---|---|---|---|---|"]
    try:
        for metric in METRICS:
            for run in runs:
                for level in (0, 2):
                    rows = con.execute(CELLS, [run, level, metric]).fetchall()
                    if not rows:
                        continue
                    for name, covariates in COVARIATES.items():
                        values = adjusted(rows, covariates)
                        aa = log_ratios(values, AA_ARM, BASELINE)
                        effect = log_ratios(values, EFFECT_ARM, BASELINE)
                        s, ratio = pair_sd(aa), median_ratio(effect)
                        lines.append(f"| {metric} | {run} | {level} | {name} | {s:.3f} ({len(aa)}) "
                                     f"| {ratio:.2f}x |")
    finally:
        con.close()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=Path, required=True, help="a calibration pool's ladder file")
    parser.add_argument("--run", type=int, action="append", required=True, help="run id(s) of the pool")
    parser.add_argument("--write-results", action="store_true", help="write this folder's RESULTS.md")
    args = parser.parse_args(argv)
    body = table(args.pool, args.run)
    print(body)
    if args.write_results:
        runs = "".join(f" --run {r}" for r in args.run)
        command = f"python research/2026-12-host-noise/host_covariate.py --pool {args.pool}{runs}"
        text = "\n".join(["## The host's view of the guest as a covariate (issue 32)", "", stamp(command), "",
                          __doc__.split("\n\n")[2].replace("\n", " "), "", body])
        print(f"wrote {write_section('host_covariate', text, RESULTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
