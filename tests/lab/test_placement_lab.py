"""A profile synthesized from the bundled workload, applied in the lab VM, observed.

The profile is trained on this host (observe + synthesize, the bpf tier's
tools); inside the VM it is compiled for the guest's own shape and applied,
the workload is captured while the profile is attached, and the capture must
show the exclusive group's threads on that layer's CPUs (at least MIN_SHARE
of their CPU time, see labrun.py).
"""

from __future__ import annotations

import tomllib

import pytest

from tests.lab.labrun import MIN_SHARE, hot_slices, run_guest_script, share_on, threadwise
from threadwise.observe.store import open_capture
from threadwise.refine.measure.bundled import build

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(rolesim binary, profile path) trained on this host."""
    work = tmp_path_factory.mktemp("train")
    rolesim = build()
    observed = threadwise(
        "observe", "-d", "4s", "-o", str(work / "host.duckdb"), "--", str(rolesim), "--hot", "1"
    )
    if observed.returncode != 0:
        pytest.skip(f"training needs the bpf tier on this host: {observed.stderr.strip()[-300:]}")
    profile = work / "rolesim.toml"
    synthesized = threadwise("synthesize", str(work / "host.duckdb"), "-n", "rolesim", "-o", str(profile))
    assert synthesized.returncode == 0, synthesized.stderr
    return rolesim, profile


@pytest.fixture(scope="module")
def placement(trained):
    rolesim, profile = trained
    _result, data = run_guest_script(
        "placement.py", str(profile), str(rolesim), "--hot", "1", label="placement"
    )
    return data


def test_profile_has_an_exclusive_hot_group(trained):
    _rolesim, profile = trained
    groups = {group["name"]: group for group in tomllib.loads(profile.read_text())["group"]}
    assert groups["hot"]["treatment"] == "exclusive"


def threads_that_ran(out) -> set[str]:
    with open_capture(out / "under.duckdb") as con:
        rows = con.execute(
            "SELECT DISTINCT t.name FROM sched_slice s JOIN thread t USING (utid) WHERE t.is_target"
        ).fetchall()
    return {name for (name,) in rows}


def test_applied_profile_shows_tasks_in_each_layer(trained, placement):
    run = placement["run"]
    assert run["apply"]["rc"] == 0, run["apply"]["stderr"]
    print(f"attach took {run['apply']['json']['attach_s']:.1f} s (TCG)")
    assert run["status"]["rc"] == 0, run["status"]["stderr"]
    layers = {layer["name"]: layer for layer in run["status"]["json"]["layers"]}
    groups = tomllib.loads(trained[1].read_text())["group"]
    assert set(layers) == {group["name"] for group in groups} | {"rest"}
    assert layers["rest"]["tasks"] >= 1
    # scx_layered places a task in a layer when it runs; a thread that sleeps
    # through the whole run (rolesim's main thread) is counted in no layer.
    # A thread belongs to the FIRST group that matches it, as scx_layered places it: the
    # workload's catch-all (`match = ["*"]`, last) claims only what no other group matched
    # (rolesim's main thread, which mostly sleeps in join: in a CI run of 2026-11-29 it did not
    # run, and the old any-prefix check wrongly asked the catch-all for a task).
    unclaimed = set(threads_that_ran(placement["_out"]))
    for group in groups:
        prefixes = tuple(pattern.rstrip("*") for pattern in group["match"])
        claimed = {name for name in unclaimed if name.startswith(prefixes)}
        unclaimed -= claimed
        if claimed:
            assert layers[group["name"]]["tasks"] >= 1, (group["name"], sorted(claimed), layers)
    assert layers["hot"]["tasks"] >= 1
    assert run["stop"]["rc"] == 0 and run["stop"]["json"]["state_after"] == "disabled"
    assert run["after"]["state"] == "disabled"


def test_exclusive_threads_ran_only_on_their_layer_cpus(placement):
    run = placement["run"]
    assert run["observe"]["rc"] == 0, run["observe"]["stderr"]
    layers = {layer["name"]: layer for layer in run["status"]["json"]["layers"]}
    hot_cpus = set(layers["hot"]["cpus"])
    assert hot_cpus, "the exclusive layer got no CPUs"
    rows = hot_slices(placement["_out"] / "under.duckdb")
    assert rows, "no slices of hot-* threads in the capture"
    print(f"hot layer CPUs {sorted(hot_cpus)}; hot-* CPU time per CPU (ns) {rows}")
    for name in {thread for thread, _cpu, _dur in rows}:
        share = share_on(rows, name, hot_cpus)
        print(f"{name}: {share:.1%} of its CPU time on the exclusive layer's CPUs")
        assert share >= MIN_SHARE, f"{name}: only {share:.1%} on the exclusive layer's CPUs"
