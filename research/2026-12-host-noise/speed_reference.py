"""Does fixed work timed on the host explain the lab's A/A spread, and can the arm move it?

Problem: see host_speed.py. A speed reference is worth taking into the judge only if
(1) it explains a real share of the A/A spread of identical default-scheduler cells beside other
work, and (2) the arm does not move it: the exclusive arm's cells must read the same host speed
as the baseline's at the same level, or an adjustment takes part of the effect out with the noise
(the fault that sank the vCPU threads' host CPU time, host_covariate.py).

Approach: per run, level and metric, cells are adjusted two ways: by the ratio alone (slope 1, the
a-priori model: a TCG guest does work in proportion to its host CPU's speed; for the workers' p99
the inverse) and by a slope fitted on the baseline arms' cells. Reported: the A/A s of the judge's
pairing (per-repeat log ratios `baseline-aa` / `baseline`) raw and adjusted, the known effect
(median per-repeat ratio `exclusive` / `baseline`) raw and adjusted, the fitted slope and r, and
how far the arm moves the reference (median per-repeat log ratio of the speed index, exclusive /
baseline). Per-cell speeds are recorded once from a kept raw directory into
research/2026-12-host-noise/data/host-speed.tsv, so the table re-runs without it:

    .venv/bin/python research/2026-12-host-noise/speed_reference.py --record LADDER RUN RAW_DIR
    .venv/bin/python research/2026-12-host-noise/speed_reference.py --ladder LADDER --run RUN \
        [--write-results]
"""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...

import numpy as np
from calibration import EFFECT_ARM, TWIN
from host_covariate import log_ratios, median_ratio, pair_sd
from results import stamp, write_section
from speed_records import RECORDED, cell_speeds, recorded_speeds

from threadwise.refine.measure import store
from threadwise.refine.measure.plan import AA_ARM, BASELINE

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"  # this study's tables, not the product's
METRICS = {"hot_chunks_per_s": 1.0, "worker_lat_p99_us": -1.0}   # metric -> a-priori slope on log speed
BASELINES = (BASELINE, AA_ARM, TWIN)
CELLS = """
SELECT c.idx, c.arm, c.repeat, ln(s.value) AS y
FROM cell c JOIN sample s USING (run_id, idx)
WHERE c.run_id = ? AND c.level = ? AND s.metric = ? AND c.valid AND s.value > 0
"""


def record(ladder: Path, run: int, raw: Path) -> int:
    """Append the run's per-cell speed indices to RECORDED (replacing an earlier record of it)."""
    con = store.open_ladder(ladder, read_only=True)
    try:
        source = con.execute("SELECT workload_toml FROM run WHERE run_id = ?", [run]).fetchone()
    finally:
        con.close()
    if source is None:
        raise SystemExit(f"{ladder}: no run {run}")
    load_source = tomllib.loads(source[0]).get("load", {}).get("source", "command")
    speeds = cell_speeds(raw, source=load_source)
    kept = [line for line in (RECORDED.read_text().splitlines() if RECORDED.exists() else [])
            if line.split("\t")[:2] != [ladder.name, str(run)]]
    kept += [f"{ladder.name}\t{run}\t{idx}\t{speed:.0f}\t{fewest}"
             for idx, (speed, fewest) in sorted(speeds.items())]
    RECORDED.write_text("\n".join(kept) + "\n")
    return len(speeds)


def read_speeds(ladder: Path, run: int) -> dict[int, float]:
    """idx -> log speed index of one run's cells."""
    return {idx: math.log(speed) for idx, speed in recorded_speeds(ladder, run).items()}


def adjust(cells: list[tuple[int, str, int, float]], speed: dict[int, float],
           slope: float | None) -> tuple[dict[tuple[str, int], float], float, float]:
    """(arm, repeat) -> log metric at the baseline cells' mean speed; the slope used (fitted on
    the baseline arms' cells when `slope` is None) and r over those cells."""
    cells = [c for c in cells if c[0] in speed]
    x = np.array([speed[idx] for idx, *_ in cells])
    y = np.array([value for *_, value in cells])
    base = np.array([arm in BASELINES for _, arm, _, _ in cells])
    r = float(np.corrcoef(x[base], y[base])[0, 1]) if base.sum() > 2 else math.nan
    if slope is None:
        slope = float(np.polyfit(x[base], y[base], 1)[0]) if base.sum() > 2 else 0.0
    centre = float(x[base].mean()) if base.any() else 0.0
    fitted = y - slope * (x - centre)
    return {(arm, rep): float(v) for (_, arm, rep, _), v in zip(cells, fitted, strict=True)}, slope, r


def table(ladder: Path, runs: list[int]) -> str:
    con = store.open_ladder(ladder, read_only=True)
    lines = ["| run | metric | bg | cells with a speed | r (baseline cells) | arm moves the speed by "
             "| A/A s raw / slope-1 / fitted (slope) | known effect raw / slope-1 / fitted |",
             "|---|---|---|---|---|---|---|---|"]
    try:
        for run in runs:
            speed = read_speeds(ladder, run)
            for metric, prior in METRICS.items():
                for level in (0, 2):
                    cells = con.execute(CELLS, [run, level, metric]).fetchall()
                    if not cells:
                        continue
                    cell_speed = {(arm, rep): speed[idx] for idx, arm, rep, _ in cells if idx in speed}
                    moved = log_ratios(cell_speed, EFFECT_ARM, BASELINE)
                    raw = {(arm, rep): y for idx, arm, rep, y in cells if idx in speed}
                    one, _, r = adjust(cells, speed, prior)
                    fit, slope, _ = adjust(cells, speed, None)
                    s = [pair_sd(log_ratios(v, AA_ARM, BASELINE)) for v in (raw, one, fit)]
                    e = [median_ratio(log_ratios(v, EFFECT_ARM, BASELINE)) for v in (raw, one, fit)]
                    shift = median_ratio(moved)
                    lines.append(f"| {run} | {metric} | {level} | {len(raw)} of {len(cells)} | {r:.2f} "
                                 f"| {shift:.3f}x | {s[0]:.3f} / {s[1]:.3f} / {s[2]:.3f} ({slope:.2f}) "
                                 f"| {e[0]:.2f}x / {e[1]:.2f}x / {e[2]:.2f}x |")
    finally:
        con.close()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", nargs=3, metavar=("LADDER", "RUN", "RAW_DIR"),
                        help="record one run's per-cell speeds from its kept raw directory")
    parser.add_argument("--ladder", type=Path, help="the ladder file the recorded runs are in")
    parser.add_argument("--run", type=int, action="append", help="run id(s)")
    parser.add_argument("--write-results", action="store_true", help="write this folder's RESULTS.md")
    parser.add_argument("--section", default="speed_reference", help="RESULTS.md section name")
    args = parser.parse_args(argv)
    if args.record:
        ladder, run, raw = Path(args.record[0]), int(args.record[1]), Path(args.record[2])
        print(f"{record(ladder, run, raw)} cells recorded in {RECORDED}")
        return 0
    if args.ladder is None or not args.run:
        parser.error("give --record, or --ladder and --run")
    body = table(args.ladder, args.run)
    print(body)
    if args.write_results:
        runs = "".join(f" --run {r}" for r in args.run)
        command = (f"python research/2026-12-host-noise/speed_reference.py --ladder {args.ladder}{runs} "
                   f"--section {args.section}")
        title = f"## Fixed work timed on the host as a speed reference (issue 32): {args.ladder.name}"
        approach = __doc__.split("\n\n")[2].replace("\n", " ")
        text = "\n".join([title, "", stamp(command), "", approach, "", body])
        print(f"wrote {write_section(args.section, text, RESULTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
