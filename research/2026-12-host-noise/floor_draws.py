"""How often identical conditions meet issue 32's floor targets at 3 pairs.

Problem: issue 32 judges the lab on a busy host by one rolesim A/A ladder of 3 repeats: its
hot_chunks_per_s floors at most +-10% per level, and its worker_lat_p99_us floors at most twice
those of the same ladder on a quiet host. A floor at 3 pairs is t(0.975; 2) = 4.3 times the
standard error of three log ratios, so it moves a lot from one ladder to the next even when
nothing about the host changed. Before reading a missed target as the host's doing, measure how
often a ladder meets it when the conditions are the same by construction.

Approach: a calibration pool (benchmarks/lab_busy.py --calibration) is one run of many repeats
under one condition. Every 3-subset of its repeats is a 3-repeat A/A ladder that could have been
run (`baseline` against `baseline-aa`, the same arms lab_busy's ladders pair); its floors are the
judge's own (`stats.aa_floors`, `Floors.floor` at 3 pairs) on the subset as calibration.py draws it
(`restrict`). Reported per metric and level:
- the floors' spread over the subsets (median, 10th and 90th percentile), and the share of
  subsets with a hot floor at most +-10%;
- the p99 "at most twice" test between two DISJOINT subsets of the same run (one playing the
  quiet ladder, the other the busy one): the share of such couples whose ratio is at most 2.
Every subset and every couple of disjoint subsets is enumerated (no sampling). Subsets share
repeats, so they are not independent ladders; the shares describe this pool, not a population.

With `--quiet-run Q` (a run of the pool measured on a quiet host) each other run is also set
against Q the way the issue reads the target: the quiet ladder drawn from Q, the busy one from
the run (every couple of a Q-subset and a run's subset). Beside the share, the A/A noise of all
the repeats of each run per metric and level (the judge's s, m pairs) and the F test of the
busy run's variance against the quiet run's (one-sided: is the busy run noisier?), which asks
what the floors ask with every repeat at once.

    .venv/bin/python research/2026-12-host-noise/floor_draws.py \
        --pool benchmarks/data/lab-calibration-w10.duckdb [--run 1]
    .venv/bin/python research/2026-12-host-noise/floor_draws.py \
        --pool benchmarks/data/lab-calibration-w10.duckdb --quiet-run 3
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # results, calibration, ...

import numpy as np
from calibration import restrict
from results import stamp, write_section
from scipy.stats import f as f_dist

from threadwise.refine.measure import stats, store
from threadwise.refine.measure.plan import AA_ARM, BASELINE

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"  # this study's tables, not the product's

PAIRS = 3
HOT_TARGET = 0.10     # issue 32: hot_chunks_per_s floors at most +-10%
P99_TARGET = 2.0      # issue 32: worker p99 floors at most twice the quiet ladder's
ISSUE_LEVELS = (0, 2)  # issue 32's A/A ladder: levels 0,2


def floors_of(measured: stats.Measured, repeats: tuple[int, ...], metrics: list[str],
              levels: list[int]) -> dict[tuple[str, int], float | None]:
    """(metric, level) -> the A/A floor at 3 pairs (a ratio's half-width, +-x) of that subset."""
    floors = stats.aa_floors(restrict(measured, repeats), BASELINE, AA_ARM, metrics)
    result: dict[tuple[str, int], float | None] = {}
    for metric in metrics:
        for level in levels:
            log_floor = floors.floor(metric, PAIRS, level)
            result[(metric, level)] = None if log_floor is None else math.expm1(log_floor)
    return result


Floor = dict[tuple[str, int], float | None]   # (metric, level) -> floor at 3 pairs, or None
Subset = tuple[int, ...]


@dataclass(frozen=True)
class PoolRun:
    """One run of a pool: its A/A floors on every 3-subset of its repeats, and the A/A noise of
    all its repeats (for the F test)."""

    pool: Path
    run_id: int
    purpose: str
    window_s: float | None
    metrics: list[str]
    levels: list[int]
    repeats: list[int]
    floors: dict[Subset, Floor]
    every_repeat: stats.Floors


def load(pool: Path, run_id: int) -> PoolRun:
    con = store.open_ladder(pool, read_only=True)
    try:
        info = store.run_info(con, run_id)
        measured = store.measured(con, run_id)
        purpose, window_s = con.execute("SELECT purpose, window_s FROM run WHERE run_id = ?",
                                        [run_id]).fetchone() or ("?", None)
    finally:
        con.close()
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    repeats = sorted({r for levels in measured.get(BASELINE, {}).values()
                      for by_repeat in levels.values() for r in by_repeat})
    floors = {s: floors_of(measured, s, metrics, info.levels)
              for s in itertools.combinations(repeats, PAIRS)}
    every_repeat = stats.aa_floors(measured, BASELINE, AA_ARM, metrics)
    return PoolRun(pool, run_id, purpose, window_s, metrics, info.levels, repeats, floors, every_repeat)


def report(run: PoolRun) -> str:
    metrics, subsets, floors = run.metrics, list(run.floors), run.floors
    # (quiet ladder, busy ladder): two subsets of no common repeat, each in both roles
    couples = [(a, b) for a, b in itertools.permutations(subsets, 2) if not set(a) & set(b)]
    lines = [f"Pool `{run.pool}`, run {run.run_id} ({run.purpose}, {run.window_s} s windows): "
             f"{len(run.repeats)} repeats, every {PAIRS}-subset of them ({len(subsets)}) taken as a "
             f"{PAIRS}-repeat A/A ladder (`{BASELINE}` against `{AA_ARM}`), floors as the judge "
             "computes them.", "",
             "| metric | bg | floor at 3 pairs: median [10th, 90th percentile] "
             "| subsets with floor at most +-10% | disjoint couples with p99 floor ratio at most 2 |",
             "|---|---:|---|---:|---:|"]
    for metric in metrics:
        for level in run.levels:
            values = np.array([f for s in subsets if (f := floors[s][(metric, level)]) is not None])
            if values.size == 0:
                lines.append(f"| {metric} | {level} | - | - | - |")
                continue
            p10, median, p90 = np.percentile(values, [10, 50, 90])
            within = f"{np.mean(values <= HOT_TARGET):.0%}" if metric == metrics[0] else ""
            measured_couples = [(a, b) for a, b in couples
                                if floors[a][(metric, level)] and floors[b][(metric, level)]]
            ratio_ok = ""
            if metric != metrics[0] and measured_couples:
                ok = [floors[b][(metric, level)] <= P99_TARGET * floors[a][(metric, level)]   # type: ignore[operator]
                      for a, b in measured_couples]
                ratio_ok = f"{np.mean(ok):.0%} of {len(measured_couples)}"
            spread = f"+-{median:.1%} [{p10:.1%}, {p90:.1%}]"
            lines.append(f"| {metric} | {level} | {spread} | {within} | {ratio_ok} |")
    levels = [level for level in run.levels if level in ISSUE_LEVELS]
    share = joint(floors, floors, couples, metrics, levels)
    lines += ["", f"Every floor target at levels {', '.join(map(str, levels))} met at once (hot at most "
              f"+-10% in the busy ladder, each secondary's floor at most twice the quiet ladder's): "
              f"{share:.0%} of {len(couples)} disjoint couples of 3-repeat ladders from this one run."]
    return "\n".join(lines)


def cross(quiet: PoolRun, busy: PoolRun) -> str:
    """The busy run against the quiet one: the issue's targets with the quiet ladder drawn from
    the quiet run, and whether the busy run's A/A pairs are noisier at all (F test)."""
    quiet_id, busy_id = quiet.run_id, busy.run_id
    metrics = busy.metrics
    levels = [level for level in busy.levels if level in ISSUE_LEVELS and level in quiet.levels]
    lines = [f"Run {busy_id} ({busy.purpose}) against run {quiet_id} ({quiet.purpose}): A/A noise "
             f"of every repeat ({len(busy.repeats)} and {len(quiet.repeats)}), one pair's s on the log "
             "scale; F = busy variance / quiet variance, p one-sided (busy noisier).", "",
             "| metric | bg | s quiet (pairs) | s busy (pairs) | F | p |", "|---|---:|---:|---:|---:|---:|"]
    for metric in metrics:
        for level in levels:
            q = aa_noise(quiet, metric, level)
            b = aa_noise(busy, metric, level)
            if q is None or b is None:
                lines.append(f"| {metric} | {level} | - | - | - | - |")
                continue
            ratio = (b.sd / q.sd) ** 2
            p = float(f_dist.sf(ratio, b.df, q.df))
            lines.append(f"| {metric} | {level} | {q.sd:.3f} ({q.aa_pairs}) | {b.sd:.3f} ({b.aa_pairs}) "
                         f"| {ratio:.2f} | {p:.2f} |")
    couples = list(itertools.product(quiet.floors, busy.floors))
    share = joint(quiet.floors, busy.floors, couples, metrics, levels)
    lines += ["", f"Every floor target at levels {', '.join(map(str, levels))} met at once, the quiet "
              f"ladder from run {quiet_id} and the busy one from run {busy_id}: {share:.0%} of "
              f"{len(couples)} couples of 3-repeat ladders."]
    return "\n".join(lines)


def aa_noise(run: PoolRun, metric: str, level: int) -> stats.Noise | None:
    noise = run.every_repeat.by_level.get(metric, {}).get(level)
    return noise if noise is not None and noise.df >= 1 and math.isfinite(noise.sd) else None


def joint(quiet_floors: dict[Subset, Floor], busy_floors: dict[Subset, Floor],
          couples: list[tuple[Subset, Subset]], metrics: list[str], levels: list[int]) -> float:
    """The share of couples (quiet ladder, busy ladder) meeting every target at once."""
    primary, secondary = metrics[0], metrics[1:]

    def met(quiet: Subset, busy: Subset) -> bool:
        for level in levels:
            hot = busy_floors[busy][(primary, level)]
            if hot is None or hot > HOT_TARGET:
                return False
            for metric in secondary:
                q, b = quiet_floors[quiet][(metric, level)], busy_floors[busy][(metric, level)]
                if not q or b is None or b > P99_TARGET * q:
                    return False
        return True

    return float(np.mean([met(a, b) for a, b in couples])) if couples else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=Path, required=True, help="a calibration pool's ladder file")
    parser.add_argument("--run", type=int, action="append", help="run id(s) of the pool (default: all)")
    parser.add_argument("--quiet-run", type=int,
                        help="a run measured on a quiet host: set every other run against it")
    parser.add_argument("--write-results", action="store_true", help="write this folder's RESULTS.md")
    args = parser.parse_args(argv)
    con = store.open_ladder(args.pool, read_only=True)
    try:
        runs = args.run or [r[0] for r in con.execute(store.sql("run_ids")).fetchall()]
    finally:
        con.close()
    if args.quiet_run is not None and args.quiet_run not in runs:
        parser.error(f"--quiet-run {args.quiet_run}: not among the runs {runs} of {args.pool}")
    loaded = {run_id: load(args.pool, run_id) for run_id in runs}
    parts = [report(run) for run in loaded.values()]
    if args.quiet_run is not None:
        parts += [cross(loaded[args.quiet_run], run) for run_id, run in loaded.items()
                  if run_id != args.quiet_run]
    body = "\n\n".join(parts)
    print(body)
    if args.write_results:
        command = "python research/2026-12-host-noise/floor_draws.py --pool " + str(args.pool) + "".join(
            f" --run {r}" for r in args.run or []) + (
            f" --quiet-run {args.quiet_run}" if args.quiet_run is not None else "")
        text = "\n".join(["## Floors at 3 pairs under one condition (issue 32's targets)", "",
                          stamp(command), "", __doc__.split("\n\n")[1].replace("\n", " "), "", body])
        print(f"wrote {write_section('floor_draws', text, RESULTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
