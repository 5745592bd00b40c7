"""A canary's summary: a short markdown beside its record and a plot of the bounds over the pairs,
both read from the record alone (so `threadwise canary` writes them at the end, and anyone can
write them again from the DuckDB file)."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from threadwise.refine.canary.record import sql


def bounds_figure(con: duckdb.DuckDBPyConnection, path: Path) -> Path | None:
    """Each metric's running mean ratio and its confidence sequence after every pair (log scale),
    with 1x marked; None when no pair was judged."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    rows = con.execute(sql("bounds_by_pair")).fetchall()
    if not rows:
        return None
    metrics = sorted({row[1] for row in rows}, key=[row[1] for row in rows].index)
    figure = Figure(figsize=(7.0, 2.4 * len(metrics)), dpi=100)
    axes = figure.subplots(len(metrics), 1, squeeze=False)[:, 0]
    for ax, metric in zip(axes, metrics, strict=True):
        mine = [row for row in rows if row[1] == metric]
        pairs = [row[0] + 1 for row in mine]
        ax.fill_between(pairs, [math.exp(r[3]) for r in mine], [math.exp(r[4]) for r in mine], alpha=0.3,
                        label="confidence sequence")
        ax.plot(pairs, [math.exp(r[2]) for r in mine], marker=".", label="mean ratio so far")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(FuncFormatter(lambda value, _pos: f"{value:g}x"))
        ax.set_ylabel(f"{metric}\n(profile / default,\nabove 1: better)", fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("pairs of windows")
    figure.tight_layout()
    figure.savefig(path)
    return path


def write_summary(con: duckdb.DuckDBPyConnection, record_path: Path) -> Path:
    """RECORD.md and RECORD.png beside the record RECORD.duckdb (canary.md, canary.png)."""
    head = con.execute(sql("summary_head")).fetchone()
    assert head is not None, "a canary record has its settings row"
    (profile, target, probe, alpha, window_s, warmup_s, per_visit, outcome, reason) = head
    windows = con.execute(sql("window_rows")).fetchall()
    last = con.execute(sql("last_bounds")).fetchall()
    plot = bounds_figure(con, record_path.with_suffix(".png"))
    others = [row[6] / max(row[4] - row[3], 1e-9) / row[7] for row in windows]
    lines = [f"# canary of {profile}", "",
             f"**{outcome or 'unfinished'}**: {reason or 'the record ends without an outcome (killed?)'}", "",
             f"- target: {target}; probe: {probe}",
             f"- {len(windows)} windows of {window_s:g} s after {warmup_s:g} s warm-up, "
             f"{per_visit} per visit, ABBA; alpha {alpha:g} over all looks",
             f"- windows that did not count: {sum(not row[8] for row in windows)}",
             f"- other processes' share of the host's CPUs per window: median "
             f"{sorted(others)[len(others) // 2]:.0%}" if others else "- no window ran",
             "", "| metric | pairs | mean ratio | confidence sequence | decision |", "|---|---|---|---|---|"]
    lines += [f"| {metric} | {pairs} | {math.exp(mean):.3f}x "
              f"| [{math.exp(lower):.3f}, {math.exp(upper):.3f}] | {decision} |"
              for metric, pairs, mean, lower, upper, decision in last]
    if plot is not None:
        lines += ["", f"![the bounds after every pair]({plot.name})"]
    summary = record_path.with_suffix(".md")
    summary.write_text("\n".join(lines) + "\n")
    return summary
