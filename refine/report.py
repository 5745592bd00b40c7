"""REPORT.md and plots of a training record, from the ladder file alone.

Problem: a reviewer must be able to trust a profile's claim without trusting
whoever trained it: every number in the report has to come from stored data,
every decision has to be recomputable from it, and the conditions (TCG, vCPUs,
invalid cells) have to be stated where the numbers are.

Approach: `write_report` reads the `run`, `cell`, `comparison` and `step`
tables, writes REPORT.md (per-level table like the lab's seed tables,
refinement steps, invalid cells with reasons, method, environment,
limitations, the command to reproduce) and one PNG per run (plots.py: every
objective metric, each arm's measured medians, and the stored verdicts with
the intervals they used). Nothing is passed in from memory but paths and names.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np

from threadwise.errors import ThreadwiseError
from threadwise.refine import plots
from threadwise.refine.measure import blockers, judge, stats, store, summary
from threadwise.refine.measure.plan import BASELINE
from threadwise.refine.measure.store import sql
from threadwise.refine.search import screen_report
from threadwise.refine.search.diagnose import sql as search_sql
from threadwise.refine.search.loop import START

_UNITS = {"per_s": "/s", "_us": " us", "_ms": " ms", "_rps": " req/s"}


def _fmt(value: float | None) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def level_table(con: duckdb.DuckDBPyConnection, run_id: int, candidate: str,
                reference: str = "baseline") -> list[str]:
    """Markdown rows per level: both arms' medians, then per metric the paired ratio, its 95%
    interval and verdict, as stored by judge.judge (the same verdicts every decision used)."""
    info = store.run_info(con, run_id)
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    by_metric = {metric: {row[0]: row for row in con.execute(
        sql("comparisons"), [run_id, reference, candidate, metric]).fetchall()} for metric in metrics}
    levels = sorted(by_metric[metrics[0]])
    background = dict(((arm, level), cpus) for arm, level, cpus in con.execute(
        sql("background_got"), [run_id]).fetchall())
    shown = f"{metrics[0]}" + (f" ({', '.join(metrics[1:])})" if metrics[1:] else "")
    head = (f"| bg spinners | {reference} {shown} | {candidate} {shown} | "
            + " | ".join(f"{metric} ratio [95% interval] | verdict" for metric in metrics)
            + " | pairs | background CPUs got |")
    lines = [head, "|" + "---|" * (5 + 2 * len(metrics))]
    for level in levels:
        rows = [by_metric[metric].get(level) for metric in metrics]

        def medians(column: int, rows: list = rows) -> str:
            values = [_fmt(row[column]) if row else "-" for row in rows]
            return values[0] + (f" ({', '.join(values[1:])})" if values[1:] else "")

        cells = []
        for row in rows:
            if row is None:
                cells += ["-", "-"]
                continue
            _level, _ref, _cand, ratio, low, high, verdict, *_ = row
            interval = f"[{_fmt(low)}, {_fmt(high)}]" if low is not None else "[-]"
            cells += [f"{_fmt(ratio)} {interval}", verdict.replace("_", " ")]
        first = rows[0]
        pairs = "-" if first is None else (f"{first[7]}" + (f" ({first[8]} disturbed)" if first[8] else ""))
        got = (f"{_fmt(background.get((reference, level)))} / {_fmt(background.get((candidate, level)))}"
               if level > 0 else "-")
        lines.append(f"| {level} | {medians(1)} | {medians(2)} | " + " | ".join(cells)
                     + f" | {pairs} | {got} |")
    return lines


def floors_line(con: duckdb.DuckDBPyConnection, run_id: int | None, n: int) -> str:
    """What the run's own A/A arm says each metric's verdicts had to clear, level by level."""
    floors = judge.load_floors(con, run_id)
    if not floors.by_level:
        return ("A/A floors: not measured in this run (no A/A arm: verdicts rest on each "
                "comparison's own spread of paired ratios only).")
    parts = [f"`{metric}` {floors.margin(metric, n)} (from {floors.pairs(metric)} A/A pairs)"
             for metric in floors.by_level]
    return (f"A/A floors (ladder run {run_id}: the default scheduler against itself, interleaved in the "
            f"same run, at {n} pairs): " + "; ".join(parts) + ". Each verdict's interval pools its "
            "level's A/A pairs with its own pairs' spread (Student's t); a verdict is `better` or "
            "`worse` only when the interval excludes 1.")


def plot_run(con: duckdb.DuckDBPyConnection, run_id: int, path: Path, *, title: str) -> Path:
    """PNG of a run: every objective metric (a row each), the arms' measured medians and ranges, and
    each profile arm's stored ratio, interval and verdict against the baseline (plots.py)."""
    plots.ladder_figure(con, run_id, title=title).savefig(path)
    return path


def environment(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    row = con.execute(sql("environment"), [run_id]).fetchone()
    host, guest, vcpus, tcg, scx, shape, levels, repeats, window, warmup, order, seed, started = row
    where = (f"taken under TCG (software emulation) in a {vcpus}-vCPU lab VM (kernel {guest}) on a "
             f"host running {host}" if tcg else f"taken directly on a {vcpus}-CPU host, kernel {host}")
    return [f"- {where}",
            f"- scx_layered {scx}; profiles compiled for `{shape}`",
            f"- levels {json.loads(levels)} background spinners, {repeats} repeats, {order} arm order, "
            f"seed {seed}; {window:g} s windows after {warmup:g} s warm-up; "
            f"started {started:%Y-%m-%d %H:%M} UTC"]


def steps_table(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One row per step: the candidate, why the search chose it (`-`: a record older than the
    guided search, which tried candidates in registry order), its run, decision and reason."""
    rows = con.execute(search_sql("steps_chosen")).fetchall()
    lines = ["| step | candidate | chosen because | ladder run | decision | reason |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {step} | `{cand}` | {because or '-'} | {run if run is not None else '-'} | "
              f"**{decision}** | {reason} |"
              for step, run, cand, decision, reason, because in rows]
    return lines


def best_measurement(con: duckdb.DuckDBPyConnection) -> tuple[int, str] | None:
    """(run, arm) of the final best profile's most recent measurement, from the step table."""
    rows = con.execute(sql("measured_steps")).fetchall()
    if not rows:
        return None
    step, run_id, decision = rows[-1]
    if step == 0:
        return run_id, "start"
    return run_id, "candidate" if decision == "kept" else "best"


def final_comparison(con: duckdb.DuckDBPyConnection) -> stats.LadderComparison | None:
    """The final best profile against the default scheduler, judged from the file."""
    best = best_measurement(con)
    if best is None:
        return None
    run_id, arm = best
    info = store.run_info(con, run_id)
    return stats.compare_arms(store.measured(con, run_id), "baseline", arm,
                              primary=info.primary,  # type: ignore[arg-type]
                              secondary=info.secondary,  # type: ignore[arg-type]
                              twins=judge.twins_of(con, run_id))


def verdict_sentence(con: duckdb.DuckDBPyConnection) -> str:
    """Whether the trained profile beat the default scheduler, and the kept steps, from the file."""
    return verdict_with(con, final_comparison(con))


def verdict_with(con: duckdb.DuckDBPyConnection, final: stats.LadderComparison | None) -> str:
    """verdict_sentence with the final comparison already computed (final_comparison's result)."""
    steps = con.execute(sql("steps")).fetchall()
    kept = [candidate for step, _run, candidate, decision, _reason in steps
            if step > 0 and decision == "kept"]
    screened = screen_report.confirmed_candidate(con)
    what = ("The trained profile" if kept else
            f"The screen's choice (`{screened}`, confirmed at step 0)" if screened not in (None, START)
            else "The synthesized profile")
    beat = ("**beat the default scheduler**" if final is not None and final.wins
            else "**did not beat the default scheduler**")
    text = f"{what} {beat} ({final.reason if final is not None else 'not measured'})."
    if kept:
        text += " Refinement kept " + ", ".join(f"`{name}`" for name in kept) + "."
    elif len(steps) > 1:
        text += " No refinement step beat it; it stands as synthesized."
    return text


def candidate_class(candidate: str) -> str:
    """What kind of change a step's candidate is: `treatment=exclusive` for any group's move to an
    exclusive core, `slice_us` for any group's slice, `join` for a group joining another."""
    head, _, change = candidate.partition(":")
    if not change:
        return head  # `start`
    if ">" in change:
        return head  # join:a>b, merge:a>b
    key = change.partition("=")[0]
    return change if key == "treatment" else key


def keep_default_reasons(con: duckdb.DuckDBPyConnection, final: stats.LadderComparison | None) -> list[str]:
    """Why no profile of this record is worth applying: the final profile's verdict (`final`,
    final_comparison's), then each class of candidate the search tried, how many, what became of
    them and the first reason."""
    steps = con.execute(sql("steps")).fetchall()
    classes: dict[str, list[tuple[str, str, str]]] = {}
    for step, _run, candidate, decision, reason in steps:
        if step > 0:
            classes.setdefault(candidate_class(candidate), []).append((candidate, decision, reason))
    lines = [f"the profile measured last against the default: {final.reason if final else 'not measured'}"]
    for kind, tried in classes.items():
        decisions = ", ".join(f"{n} {d}" for d, n in Counter(d for _, d, _ in tried).most_common())
        candidate, _, reason = tried[0]
        lines.append(f"{kind} ({len(tried)} tried: {decisions}): e.g. `{candidate}`: {reason}")
    if not classes:
        lines.append("no mutation was tried (--budget 0)")
    return lines


def ladder_lines(ladder_file: Path, run_id: int, repeats: int,
                 comparisons: dict[str, stats.LadderComparison]) -> list[str]:
    """What `threadwise ladder` prints when its run is stored: the run's A/A floors, the host's
    interference, each profile arm's level table against the baseline with its verdict, and the
    invalid cells; read from the ladder file, as REPORT.md is."""
    con = store.open_ladder(ladder_file, read_only=True)
    try:
        lines = ["", floors_line(con, run_id, repeats)]
        host = summary.host_line(con, run_id)
        lines += [host] if host else []
        for name, comparison in comparisons.items():
            lines += ["", f"{name} against {BASELINE} (run {run_id} in {ladder_file}):",
                      *level_table(con, run_id, name), comparison.reason]
        lines += summary.invalid_cells(con, run_id) or ["every cell valid"]
    finally:
        con.close()
    return lines


def result_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """REPORT.md's head: the title, the result (keep the default scheduler, with its reasons, where
    nothing beat it), the floors and the final profile's table against the default scheduler; what
    `threadwise train` prints when it is done."""
    row = con.execute(sql("training")).fetchone()
    if row is None:
        raise ThreadwiseError("this ladder file has no training record (it was not written by train)",
                              hint="`threadwise ladder` prints its own tables")
    name, workload, _command, profile_path, _wall_s, _limitations = row
    final = final_comparison(con)
    verdict = verdict_with(con, final)
    best = best_measurement(con)
    lines = [f"# Training record: `{name}` on workload `{workload}`", "",
             f"Profile: `{profile_path}`. Generated by `threadwise train` from `ladder.duckdb` in this "
             "folder; nothing here is written by hand.", *screen_report.minutes_line(con), "",
             "## Result", "", verdict, ""]
    if final is None or not final.wins:
        lines += [f"**Keep the default scheduler for this service.** No profile this training measured "
                  f"beat it; the best candidate is kept as `{Path(profile_path).name}` beside this report, "
                  "for review, not to apply (`threadwise apply` refuses it without --force). What was "
                  "measured:", "", *[f"- {line}" for line in keep_default_reasons(con, final)], ""]
    if best is not None:
        run_id, arm = best
        lines += [floors_line(con, run_id, store.run_info(con, run_id).repeats), "",
                  f"The final profile (arm `{arm}` of ladder run {run_id}) against the kernel's default "
                  "scheduler, per background level (medians of the valid windows; secondary metric in "
                  "parentheses):", "", *level_table(con, run_id, arm), "",
                  f"![{name}](ladder-run{run_id}.png)", ""]
    lines += screen_report.null_section(con)
    return lines


def write_report(con: duckdb.DuckDBPyConnection, directory: Path, *, head: list[str] | None = None) -> Path:
    """REPORT.md and one plot per measured run into `directory`, from the ladder file alone; `head`:
    its `result_lines`, when the caller computed them already (train also prints them)."""
    lines = list(head) if head is not None else result_lines(con)   # raises where the file holds no training
    training = con.execute(sql("training")).fetchone()
    name, _workload, command, _profile_path, wall_s, limitations_json = training
    limitations = json.loads(limitations_json)
    runs = [r[0] for r in con.execute(sql("run_ids")).fetchall()]
    lines += screen_report.screen_section(con)
    lines += ["## Refinement steps", "",
              "Step 0 confirms the start (the screen's top, when the training screened) against the baseline "
              "and the baseline again (`baseline-aa`: the noise), beside the null arm, in one interleaved "
              "ladder. Each later step measured the baseline, the baseline again, the current "
              "best and one candidate in one interleaved ladder; a candidate is kept if every comparison is "
              "decided and, against the best, no objective metric is worse at any level and at least one "
              "is better at some level (the Pareto rule), or else if, against the "
              "baseline of the same ladder, it has no loss the best did not have, is better than the best "
              "on one of the best's losses and is worse than the best only where it still does not lose "
              "to the baseline (the trade rule; both in docs/refine.md). The search "
              "tries first what can fix the worst failure of the last ladder; \"chosen because\" names it.",
              "", *steps_table(con), ""]
    diffs = con.execute(sql("step_diffs")).fetchall()
    for step, candidate, diff in diffs:
        lines += [f"<details><summary>step {step}: {candidate} (TOML diff)</summary>", "", "```diff",
                  diff.rstrip() or "(no change)", "```", "</details>", ""]
    lines += ["## Every ladder run", ""]
    for run_id in runs:
        purpose, arms = con.execute(sql("run_summary"), [run_id]).fetchone()
        valid, total = con.execute(sql("cell_counts"), [run_id]).fetchone()
        lines.append(f"- run {run_id} ({purpose}): arms {arms}; {valid} of {total} cells valid")
        plot_run(con, run_id, directory / f"ladder-run{run_id}.png", title=f"{name}: run {run_id}")
    invalid = [line for run_id in runs for line in summary.invalid_cells(con, run_id)]
    lines += ["", "### Invalid cells (kept in the data, never averaged)", "",
              *(invalid or ["(none)"]), ""]
    lines += blockers.report_section(con)  # "Who blocked whom", when a cell was traced
    lines += ["## Method", "",
              "- Arms: `baseline` is the kernel's default scheduler (nothing attached); a profile arm runs "
              "the bundled scx_layered on the profile compiled for the guest's shape (started with "
              "`--enable-match-debug`; by the agent itself in the self-contained initramfs guest, through "
              "`threadwise apply` elsewhere), then stops it after its cells. The workload's service runs for "
              "the whole ladder, so its threads exist when each profile attaches, and after each attach the "
              "workload's processes are stopped and continued for an instant so renamed threads re-match.",
              "- Background: N named CPU spinners (`tw-spin-*`) per level. The table's last column is the "
              "CPU the background actually got (median over valid cells, in CPUs).",
              "- A cell is valid only if the spinners burned at least a quarter of min(level, CPUs - 1) CPUs "
              "(a background that never ran), the load generator stayed below 90% of a CPU, the service "
              "lived, scx_layered was attached at the window's start and end (profile cells) or nothing "
              "was (baseline cells), and every target thread sat in the layer its group names "
              "(scx_layered's tid -> layer map).",
              "- Verdicts (docs/judge.md \"Statistics\"): the cells of one level and repeat of two arms "
              "ran close together (the arms' order rotates every repeat) and form a pair; the ratio is "
              "exp(mean of the pairs' log ratios); its 95% interval is Student's t over the pooled noise "
              "of one pair: the pairs' own spread and the same level's A/A pairs of the same run (the "
              "default scheduler against itself, `baseline-aa`). Pairs whose cells the host denied "
              "unequally are left out (`disturbed`). An `insufficient` comparison decides nothing: a step "
              "resting on one is reverted, a verdict with one is \"not decided\". Tables, decisions and "
              "the verdict above come from the same stored comparisons.", "",
              "## Environment", ""]
    if runs:
        lines += environment(con, runs[-1])
        lines += [f"- {line}" for line in (summary.host_line(con, run_id) for run_id in runs) if line]
    lines += ["", *screen_report.minutes_section(con)]
    lines += ["## Limitations", "", *[f"- {item}" for item in limitations], "",
              "## Reproduce", "", "```sh", command, "```", "",
              (f"Training took {wall_s / 60:.1f} minutes of wall time." if wall_s is not None
               else "Training wall time: not recorded."), ""]
    path = directory / "REPORT.md"
    path.write_text("\n".join(lines))
    return path
