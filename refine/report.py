"""REPORT.md and plots of a training record, from the ladder file alone.

Problem: a reviewer must be able to trust a profile's claim without trusting
whoever trained it: every number in the report has to come from stored data,
every decision has to be recomputable from it, and the conditions (TCG, vCPUs,
invalid cells) have to be stated where the numbers are.

Approach: `write_report` reads the `run`, `cell`, `comparison` and `step`
tables, writes REPORT.md (per-level table like the lab's seed tables,
refinement steps, invalid cells with reasons, method, environment,
limitations, the command to reproduce) and one PNG per run (metric against
background level per arm, error bars the seeded bootstrap 95% CI of each
arm's median). Nothing is passed in from memory but paths and names.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np

from threadwise.refine import store
from threadwise.refine.store import sql

_UNITS = {"per_s": "/s", "_us": " us", "_ms": " ms", "_rps": " req/s"}


def _fmt(value: float | None) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _median_ci(values: list[float], seed: int, n_boot: int = 2000) -> tuple[float, float, float]:
    data = np.asarray(values, dtype=float)
    median = float(np.median(data))
    if data.size < 2:
        return median, median, median
    rng = np.random.default_rng(seed)
    boot = np.median(data[rng.integers(0, data.size, (n_boot, data.size))], axis=1)
    return median, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def level_table(con: duckdb.DuckDBPyConnection, run_id: int, candidate: str,
                reference: str = "baseline") -> list[str]:
    """Markdown rows: bg | reference metric (secondary) | candidate ... | ratio [CI] | verdict."""
    info = store.run_info(con, run_id)
    primary = info.primary[0]
    second = info.secondary[0][0] if info.secondary else None
    rows = con.execute(sql("primary_comparison"), [run_id, reference, candidate, primary]).fetchall()
    secondary = {}
    if second:
        secondary = {r[0]: (r[1], r[2], r[3], r[6]) for r in con.execute(
            sql("secondary_comparison"), [run_id, reference, candidate, second]).fetchall()}
    background = dict(((arm, level), cpus) for arm, level, cpus in con.execute(
        sql("background_got"), [run_id]).fetchall())
    head = f"| bg spinners | {reference} {primary}" + (f" ({second})" if second else "") + \
        f" | {candidate} {primary}" + (f" ({second})" if second else "") + \
        f" | ratio [95% CI] | verdict | n ({reference}/{candidate}) | background CPUs got |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for level, ref, cand, ratio, low, high, verdict, n_ref, n_cand in rows:
        extra_ref = extra_cand = ""
        note = ""
        if level in secondary:
            s_ref, s_cand, _s_ratio, s_verdict = secondary[level]
            extra_ref, extra_cand = f" ({_fmt(s_ref)})", f" ({_fmt(s_cand)})"
            if s_verdict == "worse":
                note = f"; {second} worse"
        ci = f"[{_fmt(low)}, {_fmt(high)}]" if low is not None else "[-]"
        got = (f"{_fmt(background.get((reference, level)))} / {_fmt(background.get((candidate, level)))}"
               if level > 0 else "-")
        lines.append(f"| {level} | {_fmt(ref)}{extra_ref} | {_fmt(cand)}{extra_cand} | "
                     f"{_fmt(ratio)} {ci} | {verdict.replace('_', ' ')}{note} | {n_ref}/{n_cand} | {got} |")
    return lines


def plot_run(con: duckdb.DuckDBPyConnection, run_id: int, path: Path, *, title: str) -> Path:
    """PNG: primary metric against background level, one line per arm, median with 95% CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = store.run_info(con, run_id)
    metric, direction = info.primary
    measured = store.measured(con, run_id)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for offset, (arm, levels) in enumerate(measured.items()):
        xs, ys, lows, highs = [], [], [], []
        for level in sorted(levels):
            values = levels[level].get(metric, [])
            if not values:
                continue
            median, low, high = _median_ci(values, seed=info.seed + level)
            xs.append(level + (offset - (len(measured) - 1) / 2) * 0.08)
            ys.append(median)
            lows.append(median - low)
            highs.append(high - median)
        if xs:
            ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=arm)
    ax.set_xlabel("background spinners")
    ax.set_ylabel(f"{metric} ({'higher' if direction == 'higher' else 'lower'} is better)")
    where = f"TCG, {info.vcpus}-vCPU lab VM" if info.tcg else f"{info.vcpus} CPUs"
    ax.set_title(f"{title} ({where})", fontsize=10)
    ax.set_xticks(sorted(info.levels))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def invalid_cells(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    rows = con.execute(sql("invalid_cells"), [run_id]).fetchall()
    return [f"- run {run_id} cell {idx} ({arm}, bg={level}, repeat {rep}): {why}"
            for idx, arm, level, rep, why in rows]


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
    rows = con.execute(sql("steps")).fetchall()
    lines = ["| step | candidate | ladder run | decision | reason |", "|---|---|---|---|---|"]
    lines += [f"| {step} | `{cand}` | {run if run is not None else '-'} | **{decision}** | {reason} |"
              for step, run, cand, decision, reason in rows]
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


def write_report(con: duckdb.DuckDBPyConnection, directory: Path, *, name: str, workload: str,
                 command: str, profile_path: str, wall_s: float, verdict: str,
                 limitations: list[str]) -> Path:
    """REPORT.md and one plot per measured run into `directory`, from the ladder file."""
    best = best_measurement(con)
    runs = [r[0] for r in con.execute(sql("run_ids")).fetchall()]
    lines = [f"# Training record: `{name}` on workload `{workload}`", "",
             f"Profile: `{profile_path}`. Generated by `threadwise train` from `ladder.duckdb` in this "
             "folder; nothing here is written by hand.", "", "## Result", "", verdict, ""]
    noise = con.execute(sql("noise_floor")).fetchone()[0]
    aa = con.execute(sql("aa_run")).fetchone()[0]
    if noise is not None:
        lines += [f"Noise floor: {noise:.3f} (the largest distance of an A/A bound from 1 in ladder run "
                  f"{aa}, the default scheduler against itself); every refinement decision required its "
                  f"CI to clear 1 by this margin.", ""]
    if best is not None:
        run_id, arm = best
        lines += [f"The final profile (arm `{arm}` of ladder run {run_id}) against the kernel's default "
                  "scheduler, per background level (medians of the valid windows; secondary metric in "
                  "parentheses):", "", *level_table(con, run_id, arm), "",
                  f"![{name}](ladder-run{run_id}.png)", ""]
    lines += ["## Refinement steps", "",
              "Each step measured the baseline, the current best and one candidate in one interleaved "
              "ladder; a candidate is kept only if it wins against the best (better beyond the noise at "
              "one level or more on the primary metric, worse at none, and no secondary metric worse).",
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
    invalid = [line for run_id in runs for line in invalid_cells(con, run_id)]
    lines += ["", "### Invalid cells (kept in the data, never averaged)", "",
              *(invalid or ["(none)"]), ""]
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
              "- Verdicts: ratio of medians (profile / baseline) with a seeded percentile bootstrap 95% CI. "
              "The per-level tables use no margin; the refinement decisions use the A/A noise floor as "
              "their margin (step table: `noise`).", "",
              "## Environment", ""]
    if runs:
        lines += environment(con, runs[-1])
    lines += ["", "## Limitations", "", *[f"- {item}" for item in limitations], "",
              "## Reproduce", "", "```sh", command, "```", "",
              f"Training took {wall_s / 60:.1f} minutes of wall time.", ""]
    path = directory / "REPORT.md"
    path.write_text("\n".join(lines))
    return path
