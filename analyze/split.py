"""Behaviour split: separating roles when every thread has the same name.

Problem: some servers never name their threads (MariaDB's `mariadbd`, many
JVM-less C daemons), so one name covers the event loop, the workers and the
purge threads alike, and no comm prefix can tell them apart. scx_layered can
still separate them by behaviour: its `AvgRuntime(min_us, max_us)` matcher
selects tasks by their average runtime per run (per time on the CPU).
Approach: take each thread's mean slice (cpu_ns / slices) for threads that
ran at least `min_slices` times, sort them on a log scale and look for the
widest gap between neighbours (natural breaks, k = 2). Propose a split at the
geometric middle of that gap only when the gap is at least `min_ratio` (the
two sides differ by that factor) so a unimodal spread is left alone; threads
with too few runs to judge go with the short side (they rarely run). The
ranges are [0, boundary) and [boundary, i64 max) in ns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

I64_MAX = 2**63 - 1


@dataclass(frozen=True)
class SplitProposal:
    boundary_ns: int | None        # None: no split proposed
    low_utids: list[int]
    high_utids: list[int]
    reason: str

    @property
    def ranges(self) -> tuple[list[int], list[int]] | None:
        if self.boundary_ns is None:
            return None
        return [0, self.boundary_ns], [self.boundary_ns, I64_MAX]


def propose_split(threads: pl.DataFrame, *, min_ratio: float = 4.0, min_slices: int = 3) -> SplitProposal:
    """threads: utid, cpu_ns, slices of one same-name group."""
    judged = (threads.filter(pl.col("slices") >= min_slices)
              .with_columns(avg=pl.col("cpu_ns") / pl.col("slices"))
              .sort(["avg", "utid"]))
    unjudged = threads.filter(pl.col("slices") < min_slices)["utid"].to_list()
    if judged.height < 2:
        return SplitProposal(None, threads["utid"].to_list(), [],
                             f"only {judged.height} thread(s) ran {min_slices}+ times: nothing to split")
    avg = judged["avg"].to_list()
    logs = [math.log10(max(a, 1.0)) for a in avg]
    gaps = [(logs[i + 1] - logs[i], i) for i in range(len(logs) - 1)]
    width, at = max(gaps, key=lambda g: (g[0], -g[1]))
    lo_us, hi_us = avg[0] / 1e3, avg[-1] / 1e3
    if width < math.log10(min_ratio):
        return SplitProposal(None, threads["utid"].to_list(), [],
                             f"average runtime per run is unimodal ({lo_us:,.0f}..{hi_us:,.0f} us, widest "
                             f"gap x{10 ** width:.1f} < x{min_ratio:g}): no behaviour split proposed")
    boundary = round(10 ** ((logs[at] + logs[at + 1]) / 2))
    utids = judged["utid"].to_list()
    return SplitProposal(
        boundary, utids[: at + 1] + unjudged, utids[at + 1:],
        f"average runtime per run splits x{10 ** width:.1f} apart at {boundary / 1e3:,.0f} us: "
        f"{at + 1 + len(unjudged)} thread(s) below, {len(utids) - at - 1} above (scx_layered AvgRuntime)")
