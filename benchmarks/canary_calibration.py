"""Calibration of the canary's sequential judge (refine/canary/sequence.py): false alarms under
continuous monitoring, and how many pairs a real effect takes.

Problem: the canary reads its judge after every pair of windows and claims that the chance of any
false decision over the whole canary is at most alpha. That is a property of the confidence
sequence on paper; this checks it on the noise the lab actually has, and says what it costs: how
many pairs a known gain or loss takes to decide.

Approach: streams of paired log ratios, judged exactly as `threadwise canary` judges them (the
real `Sequential`, read after every pair, primary and secondary metric):
- simulated A/A: normal, heavy-tailed (Student t, 2 df) and skewed (a lognormal magnitude with a
  random sign) noise with mean 0: any decision is false;
- A/A resampled from a lab pool: the pool's own baseline-aa against baseline pairs (every run and
  level), each drawn with a random sign (the two arms are identical, so which one is "the profile"
  is a coin flip): any decision is false;
- known effects resampled from the same pool: `exclusive` against `baseline` at bg 2 and 4 (both
  metrics better in the ladder's verdicts) and `bad` against `baseline` at bg 0 (the secondary
  3.8-6.2x worse): the share decided, which way, and the median pairs it took.
Streams are seeded and many; rates are over streams. What this does not say: resampled pairs are
independent draws, so a drift that follows the windows is not in them; the pool is one
machine's lab (TCG) on rolesim.

    .venv/bin/python benchmarks/canary_calibration.py --write-results
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import stamp, write_section

from threadwise.refine.canary import DEFAULT_MARGIN
from threadwise.refine.canary.sequence import CLIP_RATIO, Decision, Metric, Sequential
from threadwise.refine.measure import store
from threadwise.refine.measure.plan import AA_ARM, BASELINE

POOL = Path(__file__).resolve().parent / "data" / "lab-calibration.duckdb"
MARGINS = (0.05, 0.10, 0.15, 0.20, 0.30)   # the sweep --margin's default is chosen from
KEEP_SHARE = 0.95   # the rule: the smallest margin keeping the neutral-secondary gain this often


def metrics_at(margin: float) -> tuple[Metric, Metric]:
    return (Metric("hot_chunks_per_s", True, margin, primary=True),
            Metric("worker_lat_p99_us", False, margin))


METRICS = metrics_at(DEFAULT_MARGIN)


def pairs_of(path: Path, arm: str, levels: set[int] | None) -> np.ndarray:
    """(pairs x metrics) oriented log ratios of `arm` against baseline, same run, level and repeat."""
    con = store.open_ladder(path, read_only=True)
    rows: list[list[float]] = []
    try:
        for (run_id,) in con.execute("SELECT run_id FROM run WHERE completed ORDER BY run_id").fetchall():
            measured = store.measured(con, run_id)
            for level, metrics in measured.get(arm, {}).items():
                if levels is not None and level not in levels:
                    continue
                base = measured[BASELINE].get(level, {})
                repeats = set.intersection(*(set(metrics.get(m.name, {})) & set(base.get(m.name, {}))
                                             for m in METRICS))
                for r in sorted(repeats):
                    rows.append([math.log(metrics[m.name][r].value / base[m.name][r].value)
                                 * (1 if m.higher_is_better else -1) for m in METRICS])
    finally:
        con.close()
    return np.array(rows)


def judge(stream: np.ndarray, alpha: float, grid: int,
          metrics: tuple[Metric, ...] = METRICS) -> tuple[Decision, int]:
    seq = Sequential(metrics, alpha, grid)
    for n, row in enumerate(stream, start=1):
        for metric, value in zip(metrics, row, strict=True):
            seq.add(metric, float(value))
        decided = seq.decision()
        if decided is not Decision.UNDECIDED:
            return decided, n
    return Decision.UNDECIDED, len(stream)


def run(name: str, make: Callable[[int], np.ndarray], streams: int, alpha: float, grid: int, *,
        metrics: tuple[Metric, ...] = METRICS) -> dict[str, object]:
    outcomes = [judge(make(i), alpha, grid, metrics) for i in range(streams)]
    decided = [n for d, n in outcomes if d is not Decision.UNDECIDED]
    counts = {d: sum(o[0] is d for o in outcomes) for d in Decision}
    return {"name": name, "streams": streams, "better": counts[Decision.BETTER] / streams,
            "worse": counts[Decision.WORSE] / streams, "undecided": counts[Decision.UNDECIDED] / streams,
            "median_pairs": float(np.median(decided)) if decided else math.nan}


def margin_sweep(noise: dict[str, Callable[[int], np.ndarray]],
                 effects: dict[str, Callable[[int], np.ndarray]], args: argparse.Namespace) -> list[str]:
    """The same streams judged at each margin of MARGINS: what a margin costs (pairs to keep the
    known gain, to roll back the known loss) and buys (false decisions on the pool's A/A)."""
    aa = next(make for name, make in noise.items() if name.startswith("A/A resampled"))
    gain, loss = effects.values()

    def neutral_secondary(i: int) -> np.ndarray:
        """The known gain's primary beside an A/A secondary: a gain that must show its secondary
        within the margin, not better, to be kept."""
        stream = gain(i)
        stream[:, 1] = aa(i)[:, 1]
        return stream

    n = args.streams // 4
    chosen = None
    lines = ["| margin | pool A/A: any decision (false) | known gain: kept (median pairs) "
             "| gain, neutral secondary: kept (median pairs) | known loss: rolled back (median pairs) |",
             "|---|---|---|---|---|"]
    for margin in MARGINS:
        a, g, k, w = (run(name, make, n, args.alpha, args.grid, metrics=metrics_at(margin))
                      for name, make in (("aa", aa), ("gain", gain), ("neutral", neutral_secondary),
                                         ("loss", loss)))
        false = a["better"] + a["worse"]  # type: ignore[operator]
        default = " (the default)" if margin == DEFAULT_MARGIN else ""
        if chosen is None and k["better"] >= KEEP_SHARE:  # type: ignore[operator]
            chosen = margin
        lines.append(f"| {margin:.0%}{default} | {false:.1%} | {g['better']:.0%} ({g['median_pairs']:g}) "
                     f"| {k['better']:.0%} ({k['median_pairs']:g}) "
                     f"| {w['worse']:.0%} ({w['median_pairs']:g}) |")
    agrees = "the default" if chosen == DEFAULT_MARGIN else f"NOT the default ({DEFAULT_MARGIN:.0%})"
    return [*lines, "", f"The smallest margin that keeps the gain with a neutral secondary in at least "
            f"{KEEP_SHARE:.0%} of {n} streams: {chosen:.0%}" if chosen is not None else
            f"No margin of {MARGINS} keeps the gain with a neutral secondary in {KEEP_SHARE:.0%} of streams",
            f"That is {agrees}." if chosen is not None else ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=Path, default=POOL)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=200, help="pairs per stream (the canary's look budget)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--grid", type=int, default=401)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    header = stamp(".venv/bin/python benchmarks/canary_calibration.py " + " ".join(sys.argv[1:]))
    rng = np.random.default_rng(args.seed)
    shape = (args.pairs, len(METRICS))
    noise = {
        "simulated A/A, normal (sd 0.15)": lambda _i: rng.normal(0, 0.15, shape),
        "simulated A/A, heavy-tailed (0.1 t, 2 df)": lambda _i: 0.1 * rng.standard_t(2, shape),
        "simulated A/A, skewed (random sign x lognormal)": lambda _i: rng.choice([-1.0, 1.0], shape)
        * rng.lognormal(-2.5, 1.0, shape),
    }
    aa = pairs_of(args.pool, AA_ARM, None)
    noise[f"A/A resampled from the pool ({len(aa)} pairs, random signs)"] = lambda _i: (
        rng.choice([-1.0, 1.0], shape) * aa[rng.integers(0, len(aa), shape[0])])
    effects = {}
    for arm, levels, label in (("exclusive", {2, 4}, "exclusive vs baseline, bg 2 and 4 (a known gain)"),
                               ("bad", {0}, "bad vs baseline, bg 0 (a known loss on the secondary)")):
        found = pairs_of(args.pool, arm, levels)
        effects[f"{label}, {len(found)} pairs resampled"] = (
            lambda _i, found=found: found[rng.integers(0, len(found), shape[0])])
    rows = [run(name, make, args.streams, args.alpha, args.grid) for name, make in noise.items()]
    effect_rows = [run(name, make, args.streams // 4, args.alpha, args.grid)
                   for name, make in effects.items()]
    shown = args.pool.relative_to(Path.cwd()) if args.pool.is_relative_to(Path.cwd()) else args.pool
    lines = [f"Pool: `{shown}`; the judge: betting confidence sequence, alpha {args.alpha} over both "
             f"metrics, pairs clipped at {CLIP_RATIO}x, margins {DEFAULT_MARGIN:.0%} (the default), read "
             "after every pair of a "
             f"{args.pairs}-pair stream.", "",
             "| streams of | n | any decision (false) | better | worse | median pairs to a decision |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        false = row["better"] + row["worse"]  # type: ignore[operator]
        lines.append(f"| {row['name']} | {row['streams']} | {false:.1%} | {row['better']:.1%} "
                     f"| {row['worse']:.1%} | {row['median_pairs']:g} |")
    lines += ["", "| known effect | n | better | worse | undecided after the stream "
              "| median pairs to a decision |", "|---|---|---|---|---|---|"]
    for row in effect_rows:
        lines.append(f"| {row['name']} | {row['streams']} | {row['better']:.1%} | {row['worse']:.1%} "
                     f"| {row['undecided']:.1%} | {row['median_pairs']:g} |")
    lines += ["", *margin_sweep(noise, effects, args)]
    worst = max(r["better"] + r["worse"] for r in rows)  # type: ignore[operator]
    verdict = "met" if worst <= args.alpha else "NOT met"
    lines += ["", f"Canary false-alarm rate under continuous monitoring: at most {worst:.1%} of A/A streams "
              f"(alpha {args.alpha}) - target at most {args.alpha:.0%}: {verdict}"]
    print("\n".join(lines))
    if args.write_results:
        title = "## Canary: false alarms under continuous monitoring, pairs to a decision (issue 36)"
        body = "\n".join([title, "", header, *lines])
        print(f"wrote {write_section('canary_calibration', body)}")


if __name__ == "__main__":
    main()
