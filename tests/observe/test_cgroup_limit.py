"""The CPU limit of an observed cgroup: cgroup v2's cpu.max, or on a hybrid host the v1 cpu
controller's cfs quota of the cgroup the target processes share; a directory path under the
cgroup2 mount is taken as the cgroup it names. Fake hierarchies in tmp dirs (the live case
is tests/synthesize/test_bpf_cgroup.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadwise.observe import procfs
from threadwise.observe.procfs import CpuLimit


@pytest.fixture
def hierarchy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    v2, v1 = tmp_path / "unified", tmp_path / "cpu"
    (v2 / "pod").mkdir(parents=True)
    (v1 / "pod").mkdir(parents=True)
    monkeypatch.setattr(procfs, "cgroup2_mount", lambda: v2)
    monkeypatch.setattr(procfs, "_v1_cpu_mount", lambda: v1)
    monkeypatch.setattr(procfs, "_v1_cpu_cgroup", lambda pid: "/pod" if pid < 100 else "/other")
    return tmp_path


@pytest.mark.parametrize(("text", "quota"), [("250000 100000\n", 250_000), ("max 100000\n", None)])
def test_cpu_max_of_cgroup_v2(hierarchy: Path, text: str, quota: int | None) -> None:
    (hierarchy / "unified" / "pod" / "cpu.max").write_text(text)
    assert procfs.cgroup_cpu_limit("/pod", [1]) == CpuLimit(
        quota, 100_000, str(hierarchy / "unified" / "pod" / "cpu.max"))


@pytest.mark.parametrize(("quota_text", "quota"), [("150000", 150_000), ("-1", None)])
def test_v1_cfs_quota_on_a_hybrid_host(hierarchy: Path, quota_text: str, quota: int | None) -> None:
    (hierarchy / "cpu" / "pod" / "cpu.cfs_quota_us").write_text(quota_text + "\n")
    (hierarchy / "cpu" / "pod" / "cpu.cfs_period_us").write_text("100000\n")
    limit = procfs.cgroup_cpu_limit("/pod", [1, 2])
    assert limit == CpuLimit(quota, 100_000, str(hierarchy / "cpu" / "pod" / "cpu.cfs_quota_us"))


def test_no_one_limit_to_name(hierarchy: Path) -> None:
    assert procfs.cgroup_cpu_limit("/pod", []) is None            # no process to find the v1 cgroup
    assert procfs.cgroup_cpu_limit("/pod", [1, 200]) is None      # two v1 cpu cgroups
    (hierarchy / "unified" / "pod" / "cpu.max").write_text("garbage\n")
    assert procfs.cgroup_cpu_limit("/pod", [1, 200]) is None


def test_a_directory_under_the_mount_names_its_cgroup(hierarchy: Path) -> None:
    assert procfs.cgroup_path(str(hierarchy / "unified" / "pod")) == "/pod"
    assert procfs.cgroup_path(str(hierarchy / "unified" / "pod") + "/") == "/pod"
    assert procfs.cgroup_path("/pod") == "/pod"
    missing = str(hierarchy / "unified" / "missing")   # not a cgroup: left as given, refused later
    assert procfs.cgroup_path(missing) == missing
