"""Plots of a ladder run that a reader can check against REPORT.md: every objective metric, the
interval each verdict used, the verdict, and the levels that had too few pairs for one.

Problem: a run is judged on its primary and secondary metrics, per level, by
paired ratios with A/A-floored intervals (the judge, stats.py). A plot of the
primary metric's raw medians with range bars shows none of that: a reader
sees bars the verdicts never used, no verdicts, only one metric, and a level
with too few valid pairs looks as measured as any other.

Approach: one row per objective metric (primary first). Left, each arm's
median of its valid cells per level with the range of those cells (what was
measured). Right, each profile arm's paired ratio against the default
scheduler with the 95% interval the judge stored and the stored verdict
written at it; an `insufficient` level is a hollow marker without a bar, so
labelled. Verdicts and intervals come from the `comparison` rows as stored
(never recomputed here), so the plot says what REPORT.md and every decision
said. Levels are evenly spaced (categories), so labels at bg 0 and 1 do not
collide. `cells_figure` shows a run's cells in execution order with the
invalid ones marked by the kind of their reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from threadwise.refine.measure import store
from threadwise.sqlfiles import statement

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BASELINE = "baseline"          # the default scheduler's arm, the reference of the plotted ratios
# Verdict -> (label written at the point, its colour); insufficient is drawn hollow.
VERDICT_STYLE = {"better": ("better", "#1a7f37"), "worse": ("worse", "#cf222e"),
                 "within_noise": ("within noise", "#57606a"), "insufficient": ("insufficient", "#57606a")}


@dataclass(frozen=True)
class Verdict:
    """One stored comparison of an arm against the baseline at one level."""

    arm: str
    metric: str
    level: int
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    pairs: int


def _plain(value: float, _position: int) -> str:
    return f"{value:g}"


def _blank(_value: float, _position: int) -> str:
    return ""


def _plain_minor(value: float, _position: int) -> str:
    """Minor ticks of a log axis labelled at 2 and 5 times a power of ten only."""
    return f"{value:g}" if f"{value:.0e}"[0] in "25" else ""


def _sql(name: str) -> str:
    return statement("threadwise.refine", "sql/plots.sql", name)


def stored_verdicts(con: duckdb.DuckDBPyConnection, run_id: int, reference: str = BASELINE) -> list[Verdict]:
    """Every arm's stored verdicts against `reference` in the run, as the judge wrote them."""
    rows = con.execute(_sql("verdicts_against"), [run_id, reference]).fetchall()
    return [Verdict(arm, metric, int(level), ratio, low, high, verdict, int(pairs))
            for arm, metric, level, ratio, low, high, verdict, pairs in rows]


def _figure(width: float, height: float) -> Figure:
    """A figure of its own, outside pyplot: no global state to close, and a notebook's backend is
    left as it is (the PNG is written through Agg by savefig; a notebook displays the figure)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def _values(ax: Axes, measured: store.Measured, metric: str, levels: Sequence[int]) -> None:
    """Each arm's median of its valid cells per level, bars over their range (what was measured)."""
    arms = list(measured)
    for offset, arm in enumerate(arms):
        xs, ys, lows, highs = [], [], [], []
        for position, level in enumerate(levels):
            values = [obs.value for obs in measured[arm].get(level, {}).get(metric, {}).values()]
            if values:
                data = np.asarray(values, dtype=float)
                median = float(np.median(data))
                xs.append(position + (offset - (len(arms) - 1) / 2) * 0.08)
                ys.append(median)
                lows.append(median - float(data.min()))
                highs.append(float(data.max()) - median)
        if xs:
            ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=arm, color=f"C{offset}")


def _point(ax: Axes, x: float, v: Verdict, colour: str) -> tuple[float, str, str]:
    """One verdict's ratio and the interval the judge stored; insufficient hollow, without a bar.
    Returns the top of what it drew, its verdict word and that word's colour."""
    label, tone = VERDICT_STYLE.get(v.verdict, (v.verdict, "black"))
    y = v.ratio if v.ratio is not None else 1.0
    if v.verdict == "insufficient" or v.low is None or v.high is None:
        ax.plot([x], [y], marker="o", markersize=7, markerfacecolor="white", markeredgecolor=colour)
        return y, f"{label} ({v.pairs} pair{'s' * (v.pairs != 1)})", tone
    ax.errorbar([x], [y], yerr=[[y - v.low], [v.high - y]], marker="o", capsize=3, color=colour)
    return v.high, label, tone


def _ratios(ax: Axes, verdicts: list[Verdict], arms: list[str], levels: Sequence[int]) -> None:
    """Each profile arm's stored ratio against the baseline per level, as judged. A level's verdict
    words stand upright side by side above its highest bar, each over its own arm's marker."""
    shown = [arm for arm in arms if any(v.arm == arm for v in verdicts)]
    words: list[tuple[float, int, str, str]] = []      # x, level position, word, colour
    tops, bottoms = {}, [1.0]
    for offset, arm in enumerate(shown):
        colour = f"C{arms.index(arm)}"
        ax.plot([], [], marker="o", linestyle="none", color=colour, label=f"{arm} / {BASELINE}")
        for v in (v for v in verdicts if v.arm == arm and v.level in levels):
            position = levels.index(v.level)
            x = position + (offset - (len(shown) - 1) / 2) * 0.22
            top, label, tone = _point(ax, x, v, colour)
            words.append((x, position, label, tone))
            tops[position] = max(tops.get(position, top), top)
            bottoms.append(v.low if v.low is not None else (v.ratio or 1.0))
    for x, position, label, tone in words:
        ax.annotate(label, (x, tops[position]), textcoords="offset points", xytext=(0, 4), rotation=90,
                    ha="center", va="bottom", fontsize=6.5, color=tone)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    low, high = min(bottoms) / 1.3, max([1.0, *tops.values()]) * 1.3
    ax.yaxis.set_major_formatter(_plain)        # 0.1, 1, 10 rather than 10^-1 ...
    # minor ticks labelled (2, 5) only where a decade or two is all there is to read
    ax.yaxis.set_minor_formatter(_plain_minor if high / low < 300 else _blank)
    # the upper 45% of the panel is left to the upright words (log scale: in decades)
    ax.set_ylim(low, low * (high / low) ** (1 / 0.55))
    if not shown:
        ax.text(0.5, 0.5, "no stored verdicts against the default scheduler", ha="center", va="center",
                transform=ax.transAxes, fontsize=8)


def _axes_levels(ax: Axes, levels: Sequence[int]) -> None:
    ax.set_xticks(range(len(levels)), [str(level) for level in levels])
    ax.set_xlim(-0.6, len(levels) - 0.4)
    ax.set_xlabel("background spinners")
    ax.grid(alpha=0.3)


def _metric_row(axes: Sequence[Axes], data: tuple[store.Measured, list[Verdict]],
                metric: tuple[str, str], levels: Sequence[int], *, primary: bool) -> None:
    measured, verdicts = data
    (left, right), (metric, direction) = axes, metric
    kind = "primary" if primary else "secondary"
    _values(left, measured, metric, levels)
    left.set_ylabel(f"{metric}\n({direction} is better)", fontsize=8)
    left.set_title(f"{metric} ({kind}): valid cells' median, bars: range", fontsize=8.5)
    _ratios(right, [v for v in verdicts if v.metric == metric], list(measured), levels)
    better = ">" if direction == "higher" else "<"
    right.set_ylabel(f"paired ratio vs {BASELINE}\n(log; {better} 1 is better)", fontsize=8)
    right.set_title(f"{metric}: stored verdicts, bars: their 95% interval", fontsize=8.5)
    for ax in axes:
        _axes_levels(ax, levels)


def _invalid_line(con: duckdb.DuckDBPyConnection, run_id: int) -> str:
    cells = con.execute(_sql("cells"), [run_id]).fetchall()
    invalid = sum(1 for *_cell, valid, _why in cells if not valid)
    if not invalid:
        return f"all {len(cells)} cells valid"
    return f"{invalid} of {len(cells)} cells invalid (left out; REPORT.md lists why)"


def ladder_figure(con: duckdb.DuckDBPyConnection, run_id: int, *, title: str) -> Figure:
    """The run's figure: a row per objective metric, measured values left, verdicts right."""
    info = store.run_info(con, run_id)
    metrics = [info.primary, *info.secondary]
    data = (store.measured(con, run_id), stored_verdicts(con, run_id))
    levels = sorted(info.levels)
    fig = _figure(11, 3.4 * len(metrics))
    grid = fig.subplots(len(metrics), 2, squeeze=False)
    for row, metric in enumerate(metrics):
        _metric_row(grid[row], data, metric, levels, primary=row == 0)
    handles, labels = grid[0][0].get_legend_handles_labels()
    if grid[0][1].get_legend_handles_labels()[0]:   # beside the panel: its points fill it
        grid[0][1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if handles:
        grid[0][0].legend(handles, labels, fontsize=7)
    else:   # no arm has a valid cell: say so (an empty legend would only warn)
        grid[0][0].text(0.5, 0.5, "no valid cells in this run (REPORT.md lists the reasons)", ha="center",
                        va="center", transform=grid[0][0].transAxes, fontsize=8)
    where = f"TCG, {info.vcpus}-vCPU lab VM" if info.tcg else f"{info.vcpus} CPUs"
    fig.suptitle(f"{title} ({where}; {_invalid_line(con, run_id)}); hollow: too few pairs for a verdict",
                 fontsize=10)
    fig.tight_layout()
    return fig


def cells_figure(con: duckdb.DuckDBPyConnection, run_id: int) -> Figure:
    """The run's cells in execution order, one row per arm: valid dots, invalid crosses labelled with
    the kind of their first reason (the text before its ':')."""
    cells = con.execute(_sql("cells"), [run_id]).fetchall()
    arms = list(dict.fromkeys(arm for _idx, arm, *_rest in cells))
    fig = _figure(11, 0.9 * len(arms) + 1.6)
    ax = fig.subplots()
    for idx, arm, level, _repeat, valid, reasons in cells:
        y = arms.index(arm)
        if valid:
            ax.plot([idx], [y], marker="o", markersize=4, color="#1a7f37")
        else:
            ax.plot([idx], [y], marker="x", markersize=8, color="#cf222e")
            kind = reasons.split(":", 1)[0][:24]
            ax.annotate(f"{kind} (bg {level})", (idx, y), textcoords="offset points", xytext=(0, 7),
                        rotation=90, ha="center", va="bottom", fontsize=6.5, color="#cf222e")
    ax.set_yticks(range(len(arms)), arms)
    ax.set_ylim(-0.5, len(arms) - 0.1)   # room above the top row for its upright reasons
    ax.set_xlabel("cell, in execution order")
    invalid = sum(1 for cell in cells if not cell[4])
    ax.set_title(f"run {run_id}: {len(cells)} cells, {invalid} invalid (red crosses, with the kind of "
                 "their reason and their level)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
