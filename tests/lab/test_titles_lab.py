"""Roles from process titles, at runtime: does the real scx_layered place nginx's roles apart?

Problem: a service whose roles show only in process titles (Debian's nginx: master as root,
workers as www-data, all of comm `nginx`) gets one profile group per role, selected by comm
AND `UIDEquals` (the effective uid; docs/analyze.md "Roles from process titles"). The bpf tier
proves only that scx_layered's parser accepts that config (tests/synthesize/test_bpf_nginx.py,
`--print-and-exit`); nothing showed that the running scheduler then puts the master and the
workers in their own layers. runtime/membership.py cannot say either: it predicts a thread's
layer from names, and a uid group is one a name cannot decide.

Approach: the profile comes from the pipeline, not from a hand-written file: on this host a
private nginx (tests/nginxserve.py) under a loopback load is captured with `threadwise observe
--pid` (real eBPF) and synthesized; it must hold nginx-master (uid 0) and nginx-worker (uid of
www-data). In the lab VM (which shares this root filesystem, so the same nginx and user exist)
tests/lab/guest/titles.py starts its own nginx, applies the profile with the real CLI, wakes
the master and drives a loopback load, and reads each nginx thread's layer from scx_layered's
task state (threadwise-layer-of), with its euid, title and whether it ran since the attach.
scx_layered matches a task when it becomes runnable, so only threads that ran are judged: each
master thread that ran must sit in nginx-master, each worker thread that ran in nginx-worker,
and the master and at least one worker must have run. The same boot also measures workers
forked by a reload while the profile is attached (`reload`, see the driver's note).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests import nginxserve
from tests.conftest import alone_with_labs, bpf_missing
from tests.lab.labrun import run_guest_script, threadwise

pytestmark = [pytest.mark.lab, pytest.mark.slow]

CAPTURE_S = 4
MASTER, WORKER = "nginx-master", "nginx-worker"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The nginx profile synthesized from a capture of a running nginx on this host."""
    missing = nginxserve.missing() or bpf_missing()
    if missing:
        pytest.skip(f"the host capture of nginx cannot run: {missing}")
    work = tmp_path_factory.mktemp("titles")
    capture = work / "nginx.duckdb"
    with nginxserve.serving(work / "nginx") as (master, port), alone_with_labs("nginx capture"), \
            nginxserve.loopback_load(port):
        observed = threadwise("observe", "--pid", str(master.pid), "-d", f"{CAPTURE_S}s", "-o", str(capture))
    if observed.returncode != 0:
        pytest.skip(f"the host capture needs the bpf tier on this host: {observed.stderr.strip()[-300:]}")
    profile = work / "nginx.toml"
    synthesized = threadwise("synthesize", str(capture), "-n", "nginx", "-o", str(profile))
    assert synthesized.returncode == 0, synthesized.stderr
    return profile


@pytest.fixture(scope="module")
def guest(trained: Path) -> dict[str, Any]:
    _result, data = run_guest_script("titles.py", str(trained), label="titles")
    assert data["missing"] is None, f"the lab guest cannot run nginx: {data['missing']}"
    assert "error" not in data, data["error"]
    return data


def table(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"  pid {r['pid']} tid {r['tid']} euid {r['euid']} {r['title']!r}: "
                     f"layer {r['layer']} (index {r['layer_index']}), "
                     f"{'ran' if r['ran'] else 'did not run'} ({r['runs_before']} -> {r['runs_after']} runs)"
                     for r in rows)


def test_profile_has_one_group_per_role_selected_by_user(trained: Path) -> None:
    groups = tomllib.loads(trained.read_text())["group"]
    by_uid = {group["name"]: group.get("uid") for group in groups if group.get("uid") is not None}
    assert by_uid == {MASTER: 0, WORKER: nginxserve.service_uid()}, trained.read_text()
    assert all(group["match"] == ["nginx"] for group in groups if group["name"] in by_uid)


def test_profile_applies_and_stops_in_the_guest(trained: Path, guest: dict[str, Any]) -> None:
    assert guest["reader"], "threadwise-layer-of is not built: run scripts/setup-tracer.sh"
    assert guest["apply"]["rc"] == 0, guest["apply"]["stderr"]
    print(f"attach took {guest['apply']['json']['attach_s']:.1f} s (TCG)")
    assert guest["status"]["rc"] == 0, guest["status"]["stderr"]
    groups = {group["name"] for group in tomllib.loads(trained.read_text())["group"]}
    status_layers = [layer["name"] for layer in guest["status"]["json"]["layers"]]
    # the layer names the placements were read against are the applied config's, in its order
    assert set(guest["layers"]) == set(status_layers) == groups | {"rest"}
    assert guest["stop"]["rc"] == 0 and guest["stop"]["json"]["state_after"] == "disabled"
    assert guest["after"]["state"] == "disabled"


def test_master_and_workers_sit_in_their_own_layers(guest: dict[str, Any]) -> None:
    rows = guest["threads"]
    print(f"\nnginx threads after the attach, a SIGUSR1 to the master and a loopback load:\n{table(rows)}")
    master = [r for r in rows if r["pid"] == guest["master_pid"]]
    workers = [r for r in rows if r["pid"] in guest["worker_pids"]]
    assert len(guest["worker_pids"]) == nginxserve.WORKERS
    # the driver's nginx has the roles the profile was trained on
    assert master and all(r["euid"] == 0 and "master process" in r["title"] for r in master)
    assert workers and all(r["euid"] == guest["service_uid"] and "worker process" in r["title"]
                           for r in workers)
    # scx_layered matches a task as it becomes runnable: only threads that ran are judged
    assert any(r["ran"] for r in master), "the master did not run after the SIGUSR1"
    assert any(r["ran"] for r in workers), "no worker ran under the load"
    misplaced = [r for r in master if r["ran"] and r["layer"] != MASTER]
    misplaced += [r for r in workers if r["ran"] and r["layer"] != WORKER]
    assert not misplaced, f"threads that ran outside their role's layer:\n{table(misplaced)}"


def test_reload_workers_sit_in_the_worker_layer(guest: dict[str, Any]) -> None:
    """Workers forked while the profile is attached (SIGHUP). scx_layered 1.1.4 matches a new
    task when it first becomes runnable after the fork, still as root, and no setuid hook
    re-matches it: before runtime/newcomers.py both reloaded workers sat in nginx-master. The
    supervisor now re-matches each as the user it became; read after a load, then after a
    manual re-match (membership.rematch) and another load."""
    reload = guest["reload"]
    print("\nthe supervisor's re-matches:\n  " + "\n  ".join(reload["supervisor"]))
    print(f"workers forked by a reload while attached, after a load:\n{table(reload['threads'])}")
    print(f"the same after membership.rematch and a load:\n{table(reload['after_rematch'])}")
    assert len(reload["worker_pids"]) == nginxserve.WORKERS, reload
    uid = nginxserve.service_uid()
    for pid in reload["worker_pids"]:
        assert any(f"re-matched pid {pid} (euid {uid}," in line for line in reload["supervisor"]), \
            f"the supervisor did not re-match worker {pid} as uid {uid}: {reload['supervisor']}"
    after_reload = reload["threads"]
    assert any(r["ran"] for r in after_reload), "no reloaded worker ran under the load"
    misplaced = [r for r in after_reload if r["ran"] and r["layer"] != WORKER]
    assert not misplaced, f"reloaded workers outside {WORKER}:\n{table(misplaced)}"
    rematched = reload["after_rematch"]
    assert any(r["ran"] for r in rematched), "no reloaded worker ran after the re-match"
    misplaced = [r for r in rematched if r["ran"] and r["layer"] != WORKER]
    assert not misplaced, f"re-matched workers outside {WORKER}:\n{table(misplaced)}"
