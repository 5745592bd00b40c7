"""Per-cell host speeds (host_speed.py), recorded from kept raw directories: a ladder
file does not store them, so they live in data/host-speed.tsv beside this script, one line a cell (ladder
file name, run, cell idx, speed index, the fewest samples of a CPU in its window)."""

from __future__ import annotations

from pathlib import Path

import host_speed

from threadwise.refine.measure.validity import read_cell
from threadwise.runtime.lab import hostload

RECORDED = Path(__file__).resolve().parent / "data" / "host-speed.tsv"


def cell_speeds(out: Path, *, source: str) -> dict[int, tuple[float, int]]:
    """idx -> (speed index over the cell's host window, the fewest samples of any CPU there), for
    a kept raw directory with a probe's samples and the guest's clock lines."""
    series, speeds = hostload.read_series(out), host_speed.read_speeds(out)
    if series is None or speeds is None:
        return {}
    found: dict[int, tuple[float, int]] = {}
    for directory in sorted((out / "cells").iterdir()):
        if not (directory / "cell").is_file():
            continue
        raw = read_cell(directory, source=source)
        if not raw.window:
            continue
        start, end = (t + series.offset_s for t in raw.window)
        got = speeds.window(start, end)
        if got is not None:
            found[raw.idx] = got
    return found


def recorded_speeds(ladder: Path, run: int) -> dict[int, float]:
    """idx -> the speed index recorded for one run's cells (empty: none recorded)."""
    if not RECORDED.exists():
        return {}
    out = {}
    for line in RECORDED.read_text().splitlines():
        name, r, idx, speed, _fewest = line.split("\t")
        if name == ladder.name and int(r) == run:
            out[int(idx)] = float(speed)
    return out
