"""What rolesim's trained profile costs with no background, and whose cost it is (issue 35, item 7).

Question: at bg=0 the rolesim profile (hot-0 on an exclusive core, workers and feeder with latency
treatment) reads the workers' queue-to-start p99 1.14-1.35x the default scheduler's in the lab,
which makes `make demo` answer "keep the default scheduler" in some runs. Is that the profile's
placement (the exclusive core leaves workers and feeder one shared vCPU), or the cost of having
scx_layered attached at all, which no profile can remove?

Method: rolesim ladders at bg=0 only, 10-s windows, 6 repeats, each run with its own interleaved
A/A arm (the judge's same-run noise), arms rotated. Profiles derived by hand from the committed
record's final profile (research/2026-12-host-noise/data/bg0-cost/*.toml, each says how):
- `demo`: the profile as trained;
- `no-exclusive`: the same with hot-0 in a default layer (no exclusive core): placement removed;
- `catchall`: every thread in one default group (20-ms slices, no preemption): scx_layered
  attached, no treatment of ours;
- `all-latency`: every thread with latency treatment (1-ms preempting slices): scx_layered with the
  shortest slices our treatments give, no exclusive core.
Run 1 measures demo, no-exclusive and catchall; run 2 all-latency and demo again.
`--measure` runs both ladders (about 30 min of lab time under TCG) and appends them to the file;
without it the section is written from the file's stored runs: each arm's comparison against
the default scheduler as the judge stored it when it measured, each arm's per-repeat p99, and the
paired median ratio of demo to each other profile of the same run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import duckdb

from threadwise.refine import report
from threadwise.refine.measure import store, summary

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...
from results import stamp, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = HERE / "data" / "bg0-cost"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"  # this study's tables, not the product's
METRICS = ("hot_chunks_per_s", "worker_lat_p99_us")
RUNS = ((("catchall", "demo", "no-exclusive"), 11), (("all-latency", "demo"), 12))


def ladder_argv(arms: tuple[str, ...], seed: int, output: Path) -> list[str]:
    argv = [str(ROOT / ".venv" / "bin" / "threadwise"), "ladder", "rolesim"]
    for arm in arms:
        argv += ["--arm", f"{arm}={DATA / (arm + '.toml')}"]
    return [*argv, "--lab", "--levels", "0", "--repeats", "6", "--window", "10", "--seed", str(seed),
            "-o", str(output)]


def measure(output: Path) -> None:
    for arms, seed in RUNS:
        print("bg0-cost: " + " ".join(ladder_argv(arms, seed, output)), flush=True)
        subprocess.run(ladder_argv(arms, seed, output), check=True)


def _per_repeat(con: duckdb.DuckDBPyConnection, run_id: int, metric: str) -> dict[str, dict[int, float]]:
    """arm -> repeat -> value of `metric` at bg=0, valid cells only (store.measured: what the judge read)."""
    return {arm: {repeat: obs.value for repeat, obs in sorted(levels.get(0, {}).get(metric, {}).items())}
            for arm, levels in store.measured(con, run_id).items()}


def run_section(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    started, command = con.execute("SELECT started, command FROM run WHERE run_id = ?", [run_id]).fetchone()
    lines = [f"**Run {run_id}** ({started:%Y-%m-%d %H:%M} UTC): `{command}`", "",
             summary.host_line(con, run_id) or "Host interference: not recorded.", ""]
    lines.append(report.floors_line(con, run_id, 6))
    lines += ["", "| arm | hot_chunks_per_s ratio [95%] | verdict | worker_lat_p99_us ratio [95%] | verdict "
              "| worker p99 per repeat, us | median |", "|---|---|---|---|---|---|---|"]
    p99 = _per_repeat(con, run_id, "worker_lat_p99_us")
    arms = [a for (a,) in con.execute("SELECT DISTINCT candidate FROM comparison WHERE run_id = ? AND "
                                      "reference = 'baseline' ORDER BY candidate", [run_id]).fetchall()]
    for arm in ["baseline", *arms]:
        cells = []
        for metric in METRICS:
            row = con.execute("SELECT ratio, ci_low, ci_high, verdict FROM comparison WHERE run_id = ? AND "
                              "reference = 'baseline' AND candidate = ? AND metric = ? AND level = 0",
                              [run_id, arm, metric]).fetchone()
            cells += ([f"{row[0]:.3g} [{row[1]:.3g}, {row[2]:.3g}]", row[3].replace("_", " ")]
                      if row and row[0] is not None else ["(reference)", ""])
        series = p99.get(arm, {})
        shown = ", ".join(f"{v:,.0f}" for v in series.values())
        median = statistics.median(series.values())
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {shown} | {median:,.0f} |")
    demo = p99.get("demo", {})
    for arm in arms:
        if arm in ("demo", "baseline-aa") or not demo:
            continue
        ratios = [demo[r] / p99[arm][r] for r in demo if r in p99.get(arm, {})]
        lines.append(f"\nPaired demo / {arm} worker p99, median of {len(ratios)} repeats: "
                     f"{statistics.median(ratios):.3g} (per repeat {', '.join(f'{x:.2f}' for x in ratios)})")
    return lines


def section(path: Path, command: str) -> str:
    con = duckdb.connect(str(path), read_only=True)
    lines = [stamp(command), "",
             "rolesim at bg=0, 10-s windows, 6 repeats per arm, lab VM (2 vCPUs, **taken under TCG**), "
             f"ladder file `{path.relative_to(ROOT)}`. Ratios are arm / default scheduler "
             "(worker p99: above 1 is worse), judged as measured (paired-v4, same-run A/A noise).", ""]
    for (run_id,) in con.execute("SELECT run_id FROM run ORDER BY run_id").fetchall():
        lines += [*run_section(con, run_id), ""]
    con.close()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="run both ladders first (lab, ~30 min)")
    parser.add_argument("-o", "--output", type=Path, default=DATA / "ladder.duckdb", help="the ladder file")
    parser.add_argument("--write-results", action="store_true", help="write this folder's RESULTS.md")
    args = parser.parse_args(argv)
    if args.measure:
        measure(args.output)
    text = section(args.output.resolve(), "python research/2026-12-host-noise/bg0_cost.py"
                   + (" --measure" if args.measure else "") + " --write-results")
    print(text)
    if args.write_results:
        title = "## What rolesim's profile costs at bg=0, and whose cost it is (issue 35, item 7)"
        write_section("bg0_cost", f"{title}\n\n{text}", RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
