"""Lab minutes per decided search step, with and without early stop, replayed from a training.

Problem: refine's early stop (stats.early_loss, asked after each complete repeat while the guest
runs) exists to save lab time on candidates that clearly lost; how much it saves, and whether it
would have stopped a step whose full ladder kept the candidate, must be measured on real steps.

Approach: a training run with `--no-early-stop` measures every repeat of every step; its ladder
file holds each cell's samples and repeat, and each step's raw agent.log holds the guest time at
which each cell was done. For each search step (a run with arms `best` and `candidate`) the script
asks the early-stop question the live ladder asks, on the valid cells of repeats 1..k for
k = 2..repeats-1, exactly as run._Interim would (the same stats.early_loss on the same cells),
and takes the first k that stops; the step's guest time with early stop is the time at which
the last cell of repeat k was done (when the live run would end), against the time its last cell
was done. Guest times are TCG's (the lab VM).

    .venv/bin/python benchmarks/early_stop_replay.py build/train/NAME [...] [--write-results]

The trainings replayed for RESULTS.md are kept in benchmarks/data/early-stop/NAME/ (the ladder file
and each step's agent.log, copied from the training's work directory).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from results import stamp, write_section

from threadwise.refine.measure import stats, store
from threadwise.refine.measure.plan import AA_ARM, BASELINE

DONE = re.compile(r"^agent: \[(\d+(?:\.\d+)?)\] cell (\d+): done")
START = re.compile(r"^agent: \[(\d+(?:\.\d+)?)\] start ")


def cell_times(agent_log: Path) -> tuple[float, dict[int, float]]:
    """(the agent's start, cell index -> guest uptime when it was done) from a raw agent.log."""
    start, done = 0.0, {}
    for line in agent_log.read_text(errors="replace").splitlines():
        if (m := START.match(line)):
            start = float(m.group(1))
        elif (m := DONE.match(line)):
            done[int(m.group(2))] = float(m.group(1))
    return start, done


def first_stop(measured: stats.Measured, info: store.RunInfo) -> tuple[int, str] | None:
    for k in range(stats.MIN_PAIRS, info.repeats):
        kept = stats.first_repeats(measured, k)
        why = stats.early_loss(kept, baseline=BASELINE, best="best", candidate="candidate",
                               twins=(BASELINE, AA_ARM), primary=info.primary, secondary=info.secondary)
        if why:
            return k, why
    return None


def replay(work: Path, saved: list[tuple[float, float]]) -> list[str]:
    """The table's rows for one training; appends each complete step's (full, stopped) guest s."""
    con = store.open_ladder(work / "ladder.duckdb", read_only=True)
    rows = []
    try:
        runs = [r[0] for r in con.execute(store.sql("run_ids")).fetchall()]
        for step, run_id in enumerate(runs):
            arms = {r[0] for r in con.execute(store.sql("run_arms"), [run_id]).fetchall()}
            if not {"best", "candidate"} <= arms:
                continue
            info = store.run_info(con, run_id)
            raw = next((work / f"raw-step{step}{tail}" for tail in ("", "-again")
                        if (work / f"raw-step{step}{tail}" / "agent.log").is_file()), None)
            if raw is None:
                rows.append(f"| {work.name} | {step} | (no raw agent.log) | | | | |")
                continue
            start, done = cell_times(raw / "agent.log")
            repeat_of = dict(con.execute(store.sql("cell_repeats"), [run_id]).fetchall())
            if not info.completed or any(idx not in done for idx in repeat_of):
                rows.append(f"| {work.name} | {step} | {len(done)} (interrupted: not every planned cell "
                            "ran) | | | | |")
                continue
            full_s = max(done.values()) - start
            found = con.execute(store.sql("step_of_run"), [run_id]).fetchone()
            what = f"{found[1]}, {found[2]}" if found else "no step row: the training was stopped"
            stop = first_stop(store.measured(con, run_id), info)
            if stop is None:
                saved.append((full_s, full_s))
                rows.append(f"| {work.name} | {step} ({what}) | {len(done)} | "
                            f"{full_s:.0f} | no stop | {full_s:.0f} | 0% |")
                continue
            k, why = stop
            cells_k = [idx for idx, rep in repeat_of.items() if rep <= k and idx in done]
            stop_s = max(done[idx] for idx in cells_k) - start
            saved.append((full_s, stop_s))
            rows.append(f"| {work.name} | {step} ({what}) | {len(done)} | "
                        f"{full_s:.0f} | after {k} of {info.repeats} ({len(cells_k)} cells): {why[:90]} | "
                        f"{stop_s:.0f} | {1 - stop_s / full_s:.0%} |")
    finally:
        con.close()
    return rows


HEAD = ("| training | step (candidate, decision) | cells done | guest s, every repeat | early stop would "
        "stop | guest s with it | saved |\n|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, nargs="+", help="a training's work directory (build/train/NAME)")
    parser.add_argument("--write-results", action="store_true", help="write the table into RESULTS.md")
    args = parser.parse_args(argv)
    saved: list[tuple[float, float]] = []   # (every repeat, with early stop) guest s per complete step
    rows, per_training = [], []
    for work in args.work:
        mine: list[tuple[float, float]] = []
        rows += replay(work, mine)
        saved += mine
        if mine:
            full, stopped = sum(f for f, _ in mine), sum(s for _, s in mine)
            each, each_stopped = full / len(mine) / 60, stopped / len(mine) / 60
            per_training.append(f"- {work.name}: {len(mine)} complete steps, {each:.1f} lab minutes per step "
                                f"measuring every repeat, {each_stopped:.1f} with early stop "
                                f"({1 - stopped / full:.0%} less)")
    table = "\n".join([HEAD, *rows])
    print(table)
    print("\n".join(per_training))
    if args.write_results:
        command = "python benchmarks/early_stop_replay.py " + " ".join(str(w) for w in args.work)
        body = "\n".join([
            "## Early stop: lab minutes per decided search step, replayed (issue 35, item 6)", "",
            stamp(command), "",
            "Each row is one search step of a training run with `--no-early-stop` (every repeat "
            "measured). The early-stop question (stats.early_loss) is asked on the step's valid cells of "
            "repeats 1..k, as the live ladder asks it after each complete repeat; the step's guest time "
            "with early stop is when the last cell of the first stopping k was done (the agent's own "
            "clock; TCG). Steps whose candidate was kept must show no stop.", "", table, "",
            "Lab minutes per complete step (guest time, TCG), per training:", "", *per_training, "",
            f"Complete steps: {len(saved)}; guest time every repeat {sum(f for f, _ in saved):,.0f} s, with "
            f"early stop {sum(w for _, w in saved):,.0f} s "
            f"({1 - sum(w for _, w in saved) / max(sum(f for f, _ in saved), 1):.0%} less)."])
        print(f"wrote {write_section('early_stop_replay', body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
