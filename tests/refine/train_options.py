"""TrainOptions for tests that run train's steps without the lab: rolesim, levels 0 and 2,
3 repeats, outputs under the test's tmp_path."""

from __future__ import annotations

from pathlib import Path

from threadwise.refine.measure.run import Where
from threadwise.refine.measure.workload import bundled_workload_path
from threadwise.refine.train import TrainOptions


def train_options(tmp_path: Path, name: str = "rs", **changes: object) -> TrainOptions:
    base = dict(workload_path=bundled_workload_path("rolesim"), name=name, place=Where(lab=True, cpus=2),
                levels=[0, 2], repeats=3, budget=1, profiles_dir=tmp_path / "profiles",
                artifacts_dir=tmp_path / "artifacts")
    base.update(changes)
    return TrainOptions(**base)  # type: ignore[arg-type]
