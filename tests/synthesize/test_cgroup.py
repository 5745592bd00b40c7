"""Pod targeting: `[workload] cgroup` compiles to scx_layered's CgroupPrefix, is validated like a
comm pattern, comes from `observe --cgroup` captures, and passes the real `--print-and-exit` oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.synthesize.test_compact import jvm_like
from threadwise import givenclock
from threadwise.analyze.contract import AnalysisRecord
from threadwise.diagnostics import ProfileError
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.build import build_profile
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.writer import dumps

POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f3c.slice"


def pod_record(*, process: bool = True, quota_us: int | None = None,
               period_us: int | None = None) -> AnalysisRecord:
    base = jvm_like()
    return AnalysisRecord(process_name="java" if process else "", duration_ns=base.duration_ns,
                          nr_cpus=2, groups=base.groups, cgroup=POD, cgroup_cpu_quota_us=quota_us,
                          cgroup_cpu_period_us=period_us)


def pod_profile(*, process: bool = True) -> str:
    return dumps(build_profile(pod_record(process=process), "pod"))


def test_the_pods_cpu_limit_sizes_its_exclusive_group() -> None:
    # 250000/100000 us: 2.5 CPUs for 3 hot request threads -> ceil(2500m x 0.90) = 3 cores
    profile = build_profile(pod_record(quota_us=250_000, period_us=100_000), "pod")
    [request] = [g for g in profile.groups if g.treatment.value == "exclusive"]
    assert request.request_millicores == 2500 and request.exclusive_cores() == 3
    assert f"request 2500m from the pod's CPU limit (cgroup {POD}: 250000/100000 us = 2500m)" in (
        request.comment or "")
    # a tighter limit than the hot threads: 1.5 CPUs -> 2 cores, not 3
    tight = build_profile(pod_record(quota_us=150_000, period_us=100_000), "pod")
    [request] = [g for g in tight.groups if g.treatment.value == "exclusive"]
    assert (request.request_millicores, request.exclusive_cores()) == (1500, 2)
    text = dumps(tight)
    assert "request_millicores = 1500" in text


def test_an_explicit_request_wins_over_the_pods_limit() -> None:
    profile = build_profile(pod_record(quota_us=150_000, period_us=100_000), "pod",
                            requests={"request-*": 3000})
    [request] = [g for g in profile.groups if g.treatment.value == "exclusive"]
    assert request.request_millicores == 3000 and "pod's CPU limit" not in (request.comment or "")


@pytest.mark.parametrize(("quota_us", "period_us", "says"), [
    (None, 100_000, "has no CPU limit (cpu.max \"max\", or a v1 cfs quota of -1): no request from the pod"),
    (None, None, "its CPU limit could not be read"),
])
def test_no_limit_is_no_request_and_the_profile_says_so(quota_us: int | None, period_us: int | None,
                                                        says: str) -> None:
    profile = build_profile(pod_record(quota_us=quota_us, period_us=period_us), "pod")
    [request] = [g for g in profile.groups if g.treatment.value == "exclusive"]
    assert request.request_millicores is None and request.exclusive_cores() == 3
    assert says in (profile.comment or "")


def test_a_cgroup_capture_gives_a_cgroup_targeted_profile() -> None:
    text = pod_profile()
    assert f'cgroup = "{POD}"' in text and 'process = "java"' in text
    profile, source = parse_profile(text, "pod.toml")
    assert [d for d in validate(profile, source, "pod.toml") if d.severity == "error"] == []
    layers = compile_profile(profile, parse_shape("cores=4,threads-per-core=2")).config.to_json_data()
    for layer in layers[:-1]:
        for block in layer["matches"]:
            assert block[:2] == [{"PcommPrefix": "java"}, {"CgroupPrefix": POD}], layer
    assert layers[-2]["matches"] == [[{"PcommPrefix": "java"}, {"CgroupPrefix": POD}]]


def test_cgroup_alone_is_enough() -> None:
    profile, _ = parse_profile(pod_profile(process=False), "pod.toml")
    assert profile.workload.process is None and profile.workload.cgroup == POD
    layers = compile_profile(profile, parse_shape("cores=4")).config.to_json_data()
    assert layers[0]["matches"][0][0] == {"CgroupPrefix": POD}


@pytest.mark.scx
def test_the_real_scx_layered_accepts_a_cgroup_targeted_profile(scx_binary: Path) -> None:
    for process in (True, False):
        profile, _ = parse_profile(pod_profile(process=process), "pod.toml")
        for shape in ("cores=4,threads-per-core=2", "cores=2,threads-per-core=1"):
            compiled = compile_profile(profile, parse_shape(shape))
            assert oracle.check(compiled.config, scx_binary) == [], shape


@pytest.mark.parametrize(("cgroup", "message"), [
    ("kubepods.slice/pod1", "is not an absolute cgroup v2 path"),
    ("/kubepods.slice/pod*", "uses glob syntax"),
    ("/a\tb", "holds a control character"),
    ("/" + "x" * 4100, "scx_layered allows 4096"),
])
def test_bad_cgroup_paths_are_errors_at_their_line(cgroup: str, message: str) -> None:
    text = pod_profile().replace(f'cgroup = "{POD}"', f"cgroup = {cgroup!r}".replace("'", '"')
                                 if "\t" not in cgroup else 'cgroup = "/a\\tb"')
    profile, source = parse_profile(text, "pod.toml")
    [diag] = [d for d in validate(profile, source, "pod.toml") if d.rule == "cgroup_path"]
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("cgroup = "))
    assert diag.line == line and message in diag.message and diag.hint


def test_a_workload_needs_a_process_or_a_cgroup() -> None:
    text = pod_profile().replace('process = "java"\n', "").replace(f'cgroup = "{POD}"\n', "")
    with pytest.raises(ProfileError, match=r"pod.toml:\d+: workload: name the workload"):
        parse_profile(text, "pod.toml")


def test_observe_refuses_a_cgroup_that_does_not_exist(tmp_path: Path) -> None:
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "observe", "--cgroup",
                           "/threadwise-no-such.slice/pod0", "-d", "1s", "-o", str(tmp_path / "x.duckdb")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode in (3, 4), done.stderr     # 3: target missing; 4: not root (checked first)
    assert "error:" in done.stderr and "hint:" in done.stderr and "Traceback" not in done.stderr
    if done.returncode == 3:
        assert "no cgroup '/threadwise-no-such.slice/pod0'" in done.stderr
