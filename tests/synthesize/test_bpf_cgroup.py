"""bpf tier: pod targeting end to end on a real cgroup of ours.

A cgroup directory is made for the test (`threadwise-test-<pid>` under the cgroup2 mount;
on a hybrid host whose cpu controller sits in a v1 hierarchy, the same name there too, for
the CPU limit), the bundled rolesim runs inside it with a CPU limit of 1.5 CPUs, and
`threadwise observe --cgroup`, `analyze` and `synthesize` run as a user would. The profile
names the cgroup (`[workload] cgroup`), sizes its exclusive group from the limit
(`request_millicores`), compiles, and the real scx_layered accepts it (`--print-and-exit`).
The cgroups are removed in a finally, after our own process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROLESIM_ARGS, stop_by_pid
from threadwise import givenclock
from threadwise.analyze.store import load_analysis
from threadwise.observe import procfs
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.rules import validate

pytestmark = [pytest.mark.bpf, pytest.mark.scx]

QUOTA_US, PERIOD_US = 150_000, 100_000    # 1.5 CPUs: tighter than rolesim's 2 hot threads


@dataclass(frozen=True)
class Pod:
    path: str                  # as the kernel names it (what CgroupPrefix matches)
    directories: list[Path]    # the v2 directory, then the v1 cpu one if made
    limited: bool              # whether the CPU limit could be set (a cpu controller for it)


def _v1_cpu_mount() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup" and "cpu" in fields[3].split(","):
            return Path(fields[1])
    return None


def _empty_and_remove(directory: Path) -> None:
    """Move whatever is left (only our processes ever ran here) to the parent, then rmdir."""
    procs = directory / "cgroup.procs"
    for _ in range(50):
        pids = procs.read_text().split() if procs.exists() else []
        for pid in pids:
            with contextlib.suppress(OSError):
                (directory.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(FileNotFoundError):
            try:
                directory.rmdir()
            except OSError:     # EBUSY: a task still leaving
                time.sleep(0.1)
                continue
        return


@pytest.fixture
def pod() -> Iterator[Pod]:
    mount = procfs.cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount on this host")
    name = f"threadwise-test-{os.getpid()}"
    made: list[Path] = []
    try:
        v2 = mount / name
        v2.mkdir()
        made.append(v2)
        limited = False
        if (v2 / "cpu.max").exists():        # the cpu controller is enabled for v2 children
            (v2 / "cpu.max").write_text(f"{QUOTA_US} {PERIOD_US}")
            limited = True
        elif (v1 := _v1_cpu_mount()) is not None:   # hybrid: the cpu controller is v1's
            (v1 / name).mkdir()
            made.append(v1 / name)
            (v1 / name / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (v1 / name / "cpu.cfs_quota_us").write_text(str(QUOTA_US))
            limited = True
        yield Pod(f"/{name}", made, limited)
    finally:
        for directory in reversed(made):
            _empty_and_remove(directory)
        assert not any(d.exists() for d in made), made


def tw(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_a_cgroup_capture_gives_a_pod_profile_the_real_scx_layered_accepts(
        pod: Pod, tmp_path: Path, scx_binary: Path) -> None:
    from threadwise.refine.measure.bundled import build

    join = " && ".join(f"echo $$ > {d}/cgroup.procs" for d in pod.directories)
    # the shell joins the cgroups first, then becomes rolesim: every thread is born inside
    workload = subprocess.Popen(["sh", "-c", f'{join} && exec "$0" "$@"', str(build("rolesim")),
                                 *ROLESIM_ARGS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        assert workload.poll() is None, "rolesim did not start in the cgroup"
        assert procfs.cgroup_of(workload.pid) == pod.path
        capture = tmp_path / "pod.duckdb"
        done = tw("observe", "--cgroup", pod.path, "-d", "3s", "-o", str(capture))
        assert done.returncode == 0, done.stderr
    finally:
        stop_by_pid(workload)

    done = tw("analyze", str(capture), "--store")
    assert done.returncode == 0, done.stderr
    stored = load_analysis(capture)
    assert stored is not None and stored.cgroup == pod.path       # analysis_meta keeps it
    if pod.limited:
        assert (stored.cgroup_cpu_quota_us, stored.cgroup_cpu_period_us) == (QUOTA_US, PERIOD_US)

    out = tmp_path / "pod.toml"
    done = tw("synthesize", str(capture), "--name", "pod", "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert f'cgroup = "{pod.path}"' in text and 'process = "rolesim"' in text, text
    profile, _source = load_profile(out)
    assert [d for d in validate(profile) if d.severity == "error"] == [], text
    hot = [g for g in profile.groups if g.treatment.value == "exclusive"]
    if pod.limited and hot:
        # 1500m x 0.90 -> 2 cores: the pod's limit, not one core per hot thread, sizes it
        assert [g.request_millicores for g in hot] == [1500], text
        assert "from the pod's CPU limit" in (hot[0].comment or ""), text
    elif not pod.limited:
        assert "its CPU limit could not be read" in text, text
    for shape in ("cores=4,threads-per-core=2", "cores=2,threads-per-core=1"):
        compiled = compile_profile(profile, parse_shape(shape))
        for layer in compiled.config.to_json_data()[:-1]:
            assert all({"CgroupPrefix": pod.path} in block for block in layer["matches"]), layer
        assert oracle.check(compiled.config, scx_binary) == [], shape
