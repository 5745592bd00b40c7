"""A bundled workload's short training in the lab, and the checks every bundle's lab test makes.

Shared by the bundles' lab tests (memcached, mariadb, onnxrt): one real `train` (observe on the
host, the synthesized profile against the default scheduler with the A/A arm interleaved, no
mutation: budget 0), levels 0 and 1 at 2 repeats, 3-s windows, in the default (initramfs) guest.
Two repeats: what these tests check (the service runs, every cell measures, its threads sit in
their layers, the record recomputes) needs no verdict's power, and a third repeat cost each
module about a third more lab time (CI time, docs/layout.md).
"Keep the default scheduler" is a result too: then the record's rejected candidate is the profile
the checks read. Every check reads what the training wrote, never its memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from threadwise.errors import KeepDefault
from threadwise.refine.measure import store
from threadwise.refine.measure.blockers import TRACE_ENV
from threadwise.refine.measure.run import Where
from threadwise.refine.measure.workload import bundled_workload_path
from threadwise.refine.outcome import candidate_path
from threadwise.refine.train import TrainOptions, train

HOST_DISTURBED = 0.10   # a cell's share of the lab's vCPU demand the host did not serve


@dataclass(frozen=True)
class Trained:
    profile: Path        # profiles/NAME.toml, or the record's NAME.not-a-profile.toml
    record: Path         # artifacts/NAME: REPORT.md, ladder.duckdb
    lines: list[str]     # what train printed


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """No trace cell in the trainings of the lab tests: none of them checks blocker rows (a
    candidate stand-in or budget 0: no guided step reads them); tests/lab/test_blockers_lab.py
    traces. Two trace cells cost a training about 35 s under TCG (CI time, docs/layout.md)."""
    before = os.environ.get(TRACE_ENV)
    os.environ[TRACE_ENV] = "off"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TRACE_ENV, None)
        else:
            os.environ[TRACE_ENV] = before


def train_briefly(tmp_path_factory: pytest.TempPathFactory, workload: str, test_file: str) -> Trained:
    name = f"{workload}-test"
    root = tmp_path_factory.mktemp(workload)
    lines: list[str] = []
    options = TrainOptions(bundled_workload_path(workload), name, Where(lab=True, cpus=2),
                           levels=[0, 1], repeats=2, budget=0, seed=3, observe_s=4.0, window_s=3.0,
                           profiles_dir=root / "profiles", artifacts_dir=root / "artifacts",
                           command=f"pytest {test_file}",
                           null_arm=False)  # the null arm's path is tests/lab/test_train_lab.py's
    try:
        with untraced():
            profile = train(options, progress=lambda line: (lines.append(line), print(line, flush=True)))
    except KeepDefault:
        profile = candidate_path(root / "artifacts" / name, name)
    print("\n".join(line for line in lines if line.startswith("wrote ") and "groups" in line))
    return Trained(profile, root / "artifacts" / name, lines)


def check_cells_measure_and_threads_sit(record: Path, metrics: tuple[str, str]) -> list[tuple]:
    """Every cell measured both metrics, none was failed by the load or the service (a busy host
    may disturb one), at least two valid cells per arm kind, and no thread of the membership probe
    sat in another layer than its group's. Returns the membership rows (tid, comm, expected,
    actual) for the caller's own checks."""
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        cells = con.execute(
            "SELECT a.kind, c.idx, c.valid, c.reasons, "
            "c.host_wait_s / nullif(c.host_cpu_s + c.host_wait_s, 0) FROM cell c "
            "JOIN arm a USING (run_id, arm) ORDER BY c.idx").fetchall()
        measured = dict(con.execute(
            "SELECT metric, count(*) FROM sample WHERE metric IN (?, ?) GROUP BY metric",
            list(metrics)).fetchall())
        members = con.execute("SELECT tid, comm, expected_layer, actual_layer FROM membership").fetchall()
    finally:
        con.close()
    invalid = [(idx, reasons, unserved) for _, idx, valid, reasons, unserved in cells if not valid]
    failed = [r for r in invalid if "generator" in r[1] or "load" in r[1] or "service" in r[1]]
    # Under TCG the time the host denies a vCPU counts as CPU time of whatever ran in the guest, so
    # on a busy host a near-saturated generator reads saturated: allowed once, in a cell the host
    # denied 10% or more of the lab's demand (a fresh clone's make test beside other test runs:
    # mcload at 2.94 s of a 3.1-s window under the profile arm, 19% unserved).
    disturbed = [r for r in failed if "saturated" in r[1] and (r[2] or 0.0) >= HOST_DISTURBED]
    assert len(failed) <= 1 and failed == disturbed, invalid
    valid = [c for c in cells if c[2]]
    assert sum(c[0] == "baseline" for c in valid) >= 2 and sum(c[0] == "profile" for c in valid) >= 2, cells
    for metric in metrics:
        assert measured.get(metric, 0) >= len(valid), (metric, measured)
    wrong = [m for m in members if m[2] is not None and m[3] is not None and m[2] != m[3]]
    assert not wrong, wrong
    return members
