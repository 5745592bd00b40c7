"""Calibration of the ladder judge (refine/measure/stats.py): false verdicts, power, early stops.

Problem: every verdict threadwise prints (better / worse / within noise) claims a false-verdict
rate of ALPHA per comparison. The judge takes each comparison's noise from the same run's A/A
arm at the same level, pooled with the comparison's own pairs (Student's t). That claim rests
on assumptions only data can check: that the A/A pairs describe the noise of the pairs being
compared, that the lab's noise is near enough to log-normal for t at 3 pairs, that pairs cancel
the host's drift, and that a load which changes during a run (a test suite starting, another
lab booting) is covered because the A/A arm meets it too. The judge before (floors from a
separate, earlier A/A run, each level's floor shaped by the others) read 21-30% false on the
case train meets; this measures the one that replaced it, the way train uses it.

Approach: a pool is a ladder file of lab runs (benchmarks/lab_busy.py --calibration) with the
arms train measures plus known ones, many repeats, rotated order: `baseline`, `baseline-aa` (the
default scheduler again: the run's noise, as in every train step), `baseline-aa2` (a third
identical arm: the candidate of the false-verdict draws), `exclusive`
(rolesim's record of 2026-11-26, tests/refine/fixtures/records/: hot-0 on a CPU of its own, a
known effect on the primary under background) and `bad`
(benchmarks/data/rolesim-worker-nopreempt.toml: workers that starve, a known loss on the
secondary). Each draw is what train judges at n repeats: n distinct repeats of the pool, with
every arm's cells of those repeats, judged by the real `stats.compare_arms` with
twins (baseline, baseline-aa):
- false verdicts: `baseline-aa2` against `baseline` (reference and candidate swapped at random
  per draw): every `better` or `worse` is false; per metric and level, and `wins` of the ladder
  verdict (false wins);
- power at 1.3x: the same draw with `baseline-aa2`'s cells of one metric multiplied by 1.3
  (an effect of known size in the lab's real noise; `worse` for a lower-is-better metric);
- known effects: `exclusive` against `baseline` (the primary called better at bg 2 and 4),
  `bad` against `baseline` (the secondary called worse: the veto's power);
- early stops (stats.early_loss after k < n repeats): how often an identical candidate would
  be stopped (false stops: best = baseline, candidate = baseline-aa2) and how often `bad` is.
Draws are every n-subset of the pool's repeats (exact enumeration, no sampling error of our
own), or a seeded sample of `--draws` when there are more. `--mix RUN,RUN`: one virtual run
whose repeats come from two runs (a quiet boot's and a bursty boot's): a load that changes
between the repeats of one run, which the A/A arm meets as the comparison does.

What this does not say: the pools are one machine's lab (TCG) on one workload; rates are
conditional on them, and draws overlap (they share repeats), so they are not independent
experiments. Nothing here needs a VM: it re-runs from the committed pools in seconds.

    .venv/bin/python benchmarks/calibration.py --pool benchmarks/data/lab-calibration.duckdb --write-results
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import stamp, write_section

from threadwise.refine.measure import stats, store
from threadwise.refine.measure.plan import AA_ARM, BASELINE
from threadwise.refine.measure.stats import Direction, Measured, Verdict

POOL = Path(__file__).resolve().parent / "data" / "lab-calibration.duckdb"
TWIN, EFFECT_ARM, BAD_ARM = "baseline-aa2", "exclusive", "bad"
TWINS = (BASELINE, AA_ARM)
INJECTED = 1.3  # the effect size whose power the issue asks for
TARGET_FALSE, TARGET_POWER = 0.05, 0.80
WITHIN, BETTER, WORSE, INSUFFICIENT = 0, 1, -1, 9
JudgeArms = Callable[..., stats.LadderComparison]
CODE = {Verdict.WITHIN_NOISE: WITHIN, Verdict.BETTER: BETTER, Verdict.WORSE: WORSE,
        Verdict.INSUFFICIENT: INSUFFICIENT}


@dataclass(frozen=True)
class Pool:
    """One run of a pool file (or two mixed): its valid cells and design."""

    label: str
    measured: Measured
    metrics: tuple[tuple[str, Direction], ...]  # primary first
    levels: tuple[int, ...]
    repeats: tuple[int, ...]
    cells: tuple[int, int]  # valid, total
    window_s: float


@dataclass
class Calibration:
    """Verdict codes per draw x metric x level, for each question."""

    n: int
    draws: int
    false: np.ndarray  # baseline-aa2 vs baseline
    false_wins: np.ndarray  # draw -> the ladder verdict read `wins`
    injected: np.ndarray  # metric x: baseline-aa2 x 1.3 on that metric, the verdicts on it
    known: dict[str, np.ndarray] = field(default_factory=dict)  # arm -> codes
    stops: dict[str, np.ndarray] = field(default_factory=dict)  # 'aa' | 'bad' -> stopped per draw
    seconds: float = 0.0

    def rate(self, codes: np.ndarray, metric: int, level: int | None = None,
             which: tuple[int, ...] = (BETTER, WORSE)) -> float:
        """Share of judged comparisons (insufficient left out) whose code is in `which`."""
        part = codes[:, metric] if level is None else codes[:, metric, level]
        judged = part != INSUFFICIENT
        return float(np.isin(part[judged], which).mean()) if judged.any() else math.nan


def restrict(measured: Measured, repeats: Sequence[int]) -> Measured:
    """The pool's cells of `repeats` only, renumbered 1..n in the given order (pairs stay pairs)."""
    keep = {r: i + 1 for i, r in enumerate(repeats)}
    return {arm: {level: {metric: {keep[r]: obs for r, obs in cells.items() if r in keep}
                          for metric, cells in by_metric.items()}
                  for level, by_metric in levels.items()}
            for arm, levels in measured.items()}


def scaled(measured: Measured, arm: str, metric: str, factor: float) -> Measured:
    """A copy with `arm`'s cells of `metric` multiplied by `factor` (host denial kept)."""
    out = {name: levels for name, levels in measured.items()}
    out[arm] = {level: {m: ({r: replace(o, value=o.value * factor) for r, o in cells.items()}
                            if m == metric else cells) for m, cells in by_metric.items()}
                for level, by_metric in measured[arm].items()}
    return out


def draws_of(repeats: Sequence[int], n: int, limit: int, seed: int) -> list[tuple[int, ...]]:
    """Every n-subset of the repeats, or `limit` of them drawn with a seed."""
    total = math.comb(len(repeats), n)
    if total <= limit:
        return list(itertools.combinations(repeats, n))
    rng = np.random.default_rng([seed, n])
    return [tuple(sorted(int(r) for r in rng.choice(repeats, n, replace=False))) for _ in range(limit)]


def codes(result: stats.LadderComparison, metrics: Sequence[tuple[str, Direction]]) -> np.ndarray:
    return np.array([[CODE[c.verdict] for c in result.comparisons(m)] for m, _ in metrics], dtype=np.int8)


def calibrate(pool: Pool, *, n: int, limit: int, seed: int, early_k: int | None,
              judge_arms: JudgeArms = stats.compare_arms) -> Calibration:
    """`judge_arms`: the judge whose verdicts are counted (stats.compare_arms, train's; or a
    candidate with its signature). Early stops are stats' own."""
    started = time.monotonic()
    chosen = draws_of(pool.repeats, n, limit, seed)
    rng = np.random.default_rng([seed, n, 1])
    swap = rng.random(len(chosen)) < 0.5
    primary, secondary = pool.metrics[0], list(pool.metrics[1:])
    shape = (len(chosen), len(pool.metrics), len(pool.levels))
    result = Calibration(n, len(chosen), np.empty(shape, np.int8), np.zeros(len(chosen), bool),
                         np.empty((len(pool.metrics), *shape), np.int8))
    known = [arm for arm in (EFFECT_ARM, BAD_ARM) if arm in pool.measured]
    for arm in known:
        result.known[arm] = np.empty(shape, np.int8)
    if early_k:
        result.stops = {"aa": np.zeros(len(chosen), bool), **({"bad": np.zeros(len(chosen), bool)}
                                                               if BAD_ARM in pool.measured else {})}

    def judge(measured: Measured, reference: str, candidate: str) -> stats.LadderComparison:
        return judge_arms(measured, reference, candidate, primary=primary, secondary=secondary,
                          twins=TWINS)

    for d, repeats in enumerate(chosen):
        part = restrict(pool.measured, repeats)
        reference, candidate = (TWIN, BASELINE) if swap[d] else (BASELINE, TWIN)
        aa = judge(part, reference, candidate)
        result.false[d], result.false_wins[d] = codes(aa, pool.metrics), aa.wins
        for i, (metric, _) in enumerate(pool.metrics):
            result.injected[i, d] = codes(judge(scaled(part, TWIN, metric, INJECTED), BASELINE, TWIN),
                                          pool.metrics)
        for arm in known:
            result.known[arm][d] = codes(judge(part, BASELINE, arm), pool.metrics)
        if early_k:
            first = restrict(pool.measured, repeats[:early_k])
            for name, arm in (("aa", TWIN), ("bad", BAD_ARM)):
                if name in result.stops:
                    result.stops[name][d] = stats.early_loss(
                        first, baseline=BASELINE, best=BASELINE, candidate=arm, twins=TWINS,
                        primary=primary, secondary=secondary) is not None
    result.seconds = time.monotonic() - started
    return result


# ---------------------------------------------------------------------------------------------
# reading the pools


def load_pools(path: Path, runs: Sequence[int] | None) -> tuple[list[Pool], list[str]]:
    """The file's completed runs with baseline, baseline-aa and baseline-aa2 (notes: runs left out)."""
    con = store.open_ladder(path, read_only=True)
    pools, notes = [], []
    try:
        rows = con.execute("SELECT run_id, purpose, repeats, window_s, completed FROM run "
                           "ORDER BY run_id").fetchall()
        for run_id, purpose, repeats, window_s, completed in rows:
            if runs is not None and run_id not in runs:
                continue
            measured = store.measured(con, run_id)
            missing = [arm for arm in (BASELINE, AA_ARM, TWIN) if arm not in measured]
            if not completed or missing:
                notes.append(f"run {run_id} ({purpose}) left out: "
                             + ("not completed" if not completed else f"no {', '.join(missing)} arm"))
                continue
            info = store.run_info(con, run_id)
            valid, total = con.execute(store.sql("cell_counts"), [run_id]).fetchone()
            pools.append(Pool(f"run {run_id}: {purpose}", measured,
                              ((info.primary[0], info.primary[1]), *info.secondary),  # type: ignore[arg-type]
                              tuple(info.levels), tuple(range(1, int(repeats) + 1)), (int(valid), int(total)),
                              float(window_s)))
    finally:
        con.close()
    return pools, notes


def mixed(a: Pool, b: Pool) -> Pool:
    """One virtual run: a's repeats 1..k, then b's as k+1.. (a load change between repeats)."""
    if (a.metrics, a.levels) != (b.metrics, b.levels):
        raise SystemExit(f"cannot mix {a.label} and {b.label}: different metrics or levels")
    shift = max(a.repeats)
    measured: Measured = {}
    for arm in set(a.measured) & set(b.measured):
        measured[arm] = {}
        for level in a.levels:
            measured[arm][level] = {}
            for metric in (m for m, _ in a.metrics):
                first = a.measured[arm].get(level, {}).get(metric, {})
                later = {r + shift: o for r, o in b.measured[arm].get(level, {}).get(metric, {}).items()}
                measured[arm][level][metric] = {**first, **later}
    return Pool(f"{a.label} then {b.label} (mixed: the load changes between repeats)", measured, a.metrics,
                a.levels, (*a.repeats, *(r + shift for r in b.repeats)),
                (a.cells[0] + b.cells[0], a.cells[1] + b.cells[1]), a.window_s)


# ---------------------------------------------------------------------------------------------
# printing


def pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 100:.1f}%"


def effect(pool: Pool, arm: str, metric: str, level: int) -> str:
    ratios, _ = stats.pair_up(pool.measured[BASELINE].get(level, {}).get(metric, {}),
                              pool.measured[arm].get(level, {}).get(metric, {}))
    return f"{math.exp(float(np.mean(ratios))):.2f}x" if ratios else "-"


def render(pool: Pool, result: Calibration, early_k: int | None, *, judge: str | None = None) -> list[str]:
    """`judge`: the counted judge's short name (default: stats.METHOD's)."""
    judge = judge or stats.METHOD.split(':')[0]
    n, levels = result.n, " / ".join(f"bg{level}" for level in pool.levels)
    lines = [f"### {pool.label}", "",
             f"{len(pool.repeats)} repeats x levels {', '.join(map(str, pool.levels))}, {pool.window_s:g} s "
             f"windows; {pool.cells[0]} of {pool.cells[1]} cells valid; {result.draws} draws of n={n} "
             f"({result.seconds:.1f} s).", ""]
    for i, (metric, _) in enumerate(pool.metrics):
        rate = result.rate(result.false, i)
        lines.append(f"A/A false verdict rate (floors as train takes them: the same run's A/A arm, same "
                     f"level): {pct(rate)} per comparison ({metric}, n={n}, {judge}) "
                     f"- target at most {pct(TARGET_FALSE)}: {'met' if rate <= TARGET_FALSE else 'NOT met'}")
    for i, (metric, direction) in enumerate(pool.metrics):
        wanted = BETTER if direction == "higher" else WORSE
        power = result.rate(result.injected[i], i, which=(wanted,))
        lines.append(f"Power at {INJECTED}x: {pct(power)} ({metric}, n={n}, the effect injected into "
                     f"`{TWIN}`'s cells) - target at least {pct(TARGET_POWER)}: "
                     f"{'met' if power >= TARGET_POWER else 'NOT met'}")
    lines += ["", f"Per metric and level (n={n}): false better, false worse (`{TWIN}` against "
              f"`{BASELINE}`), power at {INJECTED}x (called {{better | worse}} in its direction):", "",
              "| metric | bg | false better | false worse | insufficient | power at 1.3x |",
              "|---|---:|---:|---:|---:|---:|"]
    for i, (metric, direction) in enumerate(pool.metrics):
        wanted = BETTER if direction == "higher" else WORSE
        for j, level in enumerate(pool.levels):
            judged = result.false[:, i, j]
            lines.append(f"| {metric} | {level} | {pct(result.rate(result.false, i, j, (BETTER,)))} "
                         f"| {pct(result.rate(result.false, i, j, (WORSE,)))} "
                         f"| {int((judged == INSUFFICIENT).sum())} "
                         f"| {pct(result.rate(result.injected[i], i, j, (wanted,)))} |")
    false_wins = pct(float(result.false_wins.mean()))
    lines += ["", f"False `wins` of the ladder verdict (identical arms): {false_wins} "
              f"of draws; any false verdict in a draw ({levels}, every metric): "
              f"{pct(float(np.isin(result.false, (BETTER, WORSE)).any(axis=(1, 2)).mean()))}."]
    for arm, word, metric_index in ((EFFECT_ARM, "better", 0), (BAD_ARM, "worse", len(pool.metrics) - 1)):
        if arm not in result.known:
            continue
        metric = pool.metrics[metric_index][0]
        code = BETTER if word == "better" else WORSE
        shares = ", ".join(f"bg{level} {pct(float((result.known[arm][:, metric_index, j] == code).mean()))} "
                           f"(pool effect {effect(pool, arm, metric, level)})"
                           for j, level in enumerate(pool.levels))
        lines.append(f"Known effect: `{arm}` against `{BASELINE}`, {metric} called {word}: {shares}.")
    if early_k and result.stops:
        said = "; ".join(f"{'identical candidate (false stops)' if name == 'aa' else '`bad`'} "
                         f"{pct(float(stopped.mean()))}" for name, stopped in result.stops.items())
        lines.append(f"Stopped early after {early_k} of {n} repeats (stats.early_loss, one-sided alpha "
                     f"{stats.EARLY_ALPHA} per comparison): {said} of draws.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", type=Path, default=POOL, help="the pool's ladder file")
    parser.add_argument("--runs", default=None,
                        help="comma-separated run ids (default: every usable run)")
    parser.add_argument("--mix", default=None, help="RUN,RUN: also one virtual run of both (a load change)")
    parser.add_argument("--n", type=int, default=3, help="train's repeats (pairs per comparison)")
    parser.add_argument("--also-n", default="4,5", help="further n, where the pool has them")
    parser.add_argument("--early", type=int, default=2, help="repeats after which early stops are judged")
    parser.add_argument("--draws", type=int, default=2000, help="at most this many draws per n")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write-results", action="store_true", help="write benchmarks/RESULTS.md")
    parser.add_argument("--section", default="calibration-v5",
                        help="with --write-results: the RESULTS.md section to replace (another pool, such "
                             "as one with longer windows, gets a section of its own)")
    parser.add_argument("--title",
                        default=("Calibration of the ladder judge at 3-s windows, paired-v5 "
                                 "(false verdicts, power, early stops)"),
                        help="with --write-results: the section's heading")
    args = parser.parse_args()
    header = stamp(".venv/bin/python benchmarks/calibration.py " + " ".join(sys.argv[1:]))
    runs = None if args.runs is None else [int(v) for v in args.runs.split(",")]
    pools, notes = load_pools(args.pool, runs)
    if args.mix:
        wanted = [int(v) for v in args.mix.split(",")]
        by_id = {int(p.label.split(":")[0].split()[1]): p for p in pools}
        pools.append(mixed(by_id[wanted[0]], by_id[wanted[1]]))
    try:
        shown = args.pool.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = args.pool
    lines = [f"Pool: `{shown}`; the judge: `{stats.METHOD}`, alpha {stats.ALPHA} two-sided, shared by an arm "
             "pair's K comparisons (each at alpha / K, K = levels x metrics).", "",
             *(f"{note}." for note in notes)]
    for pool, n in _runs(pools, [args.n, *(int(v) for v in args.also_n.split(",") if v)]):
        result = calibrate(pool, n=n, limit=args.draws, seed=args.seed,
                           early_k=args.early if n == args.n and args.early < n else None)
        lines += ["", *render(pool, result, args.early if n == args.n else None)]
    if not pools:
        lines.append("No completed run with baseline, baseline-aa and baseline-aa2 in the pool.")
    print("\n".join(lines))
    if args.write_results:
        body = "\n".join([f"## {args.title}", "", header, *lines])
        print(f"wrote {write_section(args.section, body)}")


def _runs(pools: list[Pool], ns: list[int]) -> Iterator[tuple[Pool, int]]:
    for pool in pools:
        for n in sorted(set(ns)):
            if n < len(pool.repeats):
                yield pool, n


if __name__ == "__main__":
    main()
