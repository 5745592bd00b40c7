"""benchmarks/host_speed.py and speed_records.py: the probe times real work on every host CPU,
and a cell's speed index weighs its samples by time inside the cell's host window only."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import host_speed
import speed_records

from threadwise.runtime.lab import hostload


def test_the_probe_times_its_loop_on_every_cpu_it_may_run_on(tmp_path: Path) -> None:
    with host_speed.SpeedProbe(tmp_path, period_s=0.05):
        deadline = time.monotonic() + 30   # a starved probe still samples; the loop only waits
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if (tmp_path / host_speed.SPEED_FILE).exists():
                samples = host_speed.read_samples(tmp_path / host_speed.SPEED_FILE)
                if set(samples) == os.sched_getaffinity(0) and all(len(v) >= 3 for v in samples.values()):
                    break
    samples = host_speed.read_samples(tmp_path / host_speed.SPEED_FILE)
    assert set(samples) == os.sched_getaffinity(0)
    for points in samples.values():
        assert len(points) >= 3
        assert all(loops == host_speed.LOOPS and ns > 0 for _, loops, ns in points)


def _cell(out: Path, idx: int, start: float, end: float) -> None:
    directory = out / "cells" / str(idx)
    directory.mkdir(parents=True)
    (directory / "cell").write_text(f"{idx} baseline 0 1\n")
    (directory / "wall").write_text(f"{start} {end}\n")


def test_a_cells_index_is_time_weighted_inside_its_host_window(tmp_path: Path) -> None:
    # guest uptime + 100 s = host monotonic time (the clock lines arrive 0-0.3 s late)
    clock = "".join(f"{100 + g + 0.3 * (g % 2)}\t{g}\n" for g in range(60))
    (tmp_path / hostload.CLOCK_FILE).write_text(clock)
    (tmp_path / hostload.VCPUS_FILE).write_text("".join(f"{100 + t}\t{t}\t0\t2\n" for t in range(60)))
    _cell(tmp_path, 0, 10.0, 20.0)   # host 110-120
    _cell(tmp_path, 1, 30.05, 40.05)   # host 130.05-140.05: 50 samples of each kind
    _cell(tmp_path, 2, 50.0, 50.3)   # host 150-150.3: 4 samples a CPU, too few
    lines = []
    for step in range(600):   # every 0.1 s from host 100 to 160, both CPUs
        t = 100 + step / 10
        for cpu in (0, 1):
            # from host 130 s bimodal: one sample in two takes twice the time
            ns = 2_000_000 if t >= 130 and step % 2 == 0 else 1_000_000
            lines.append(f"{t:.4f}\t{cpu}\t20000\t{ns}\n")
    (tmp_path / host_speed.SPEED_FILE).write_text("".join(lines))
    speeds = speed_records.cell_speeds(tmp_path, source="command")
    assert set(speeds) == {0, 1}
    assert math.isclose(speeds[0][0], 20_000 / 1e-3)
    # time-weighted: 2 x 20000 loops in 3 ms, not the median or mean of 20M and 10M per second
    assert math.isclose(speeds[1][0], 40_000 / 3e-3)
    assert speeds[0][1] >= 99


def test_the_speed_reference_table_reads_the_committed_data() -> None:
    import speed_reference

    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    text = speed_reference.table(data / "lab-speed.duckdb", [1])
    rows = [line for line in text.splitlines() if line.startswith("| 1 | hot_chunks_per_s |")]
    assert len(rows) == 2 and all("18 of 18" in row for row in rows)
