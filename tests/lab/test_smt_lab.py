"""SMT placement in a 2 cores x 2 threads guest: lint's smt_collision, statically and observed.

A profile that gives two hot threads one whole core (written here: 2000m x
cpu_fraction 0.5 = one core) is flagged by `threadwise lint` for the
guest's shape; applied in the SMT guest, the capture shows both hot threads
on the two siblings of one core, and `lint --capture` flags what it observed.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import datafiles
from tests.lab.labrun import MIN_SHARE, hot_slices, run_guest_script, share_on, threadwise
from threadwise.refine.measure.bundled import build

pytestmark = [pytest.mark.lab, pytest.mark.slow]
GUEST_SHAPE = "cores=2,threads-per-core=2"


PROFILE = datafiles.text("lab/smt-lab-profile.toml")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(rolesim, a profile giving its two hot threads one whole core). Written, not
    trained: a trained sizing depends on the host's load at training time."""
    rolesim = build()
    profile = tmp_path_factory.mktemp("smt") / "hot2.toml"
    profile.write_text(PROFILE.format(process=rolesim.name[:15]))
    valid = threadwise("validate", str(profile))
    assert valid.returncode == 0, valid.stdout + valid.stderr
    return rolesim, profile


@pytest.fixture(scope="module")
def smt_run(trained):
    rolesim, profile = trained
    _result, data = run_guest_script(
        "placement.py", str(profile), str(rolesim), "--hot", "2",
        label="smt", cpus=4, threads_per_core=2, timeout_s=1800,
    )  # fmt: skip
    return data


def findings(done: subprocess.CompletedProcess) -> list[dict]:
    report = json.loads(done.stdout)
    return report["findings"] if isinstance(report, dict) else report


def test_lint_flags_two_hot_threads_in_one_core(trained):
    done = threadwise("lint", str(trained[1]), "--shape", GUEST_SHAPE)
    assert done.returncode != 0
    assert "smt_collision" in done.stdout + done.stderr


def test_guest_has_smt_sibling_pairs(smt_run):
    assert smt_run["topology"] == {"cpu0": "0-1", "cpu1": "0-1", "cpu2": "2-3", "cpu3": "2-3"}


def test_capture_shows_both_hot_threads_on_the_siblings_of_one_core(smt_run):
    run = smt_run["run"]
    assert run["apply"]["rc"] == 0, run["apply"]["stderr"]
    assert run["observe"]["rc"] == 0, run["observe"]["stderr"]
    layers = {layer["name"]: layer for layer in run["status"]["json"]["layers"]}
    hot_cpus = set(layers["hot"]["cpus"])
    assert hot_cpus in ({0, 1}, {2, 3}), f"hot layer CPUs {hot_cpus}: not one whole core"
    rows = hot_slices(smt_run["_out"] / "under.duckdb")
    print(f"hot layer CPUs {sorted(hot_cpus)}; hot-* CPU time per CPU (ns) {rows}")
    assert {name for name, _cpu, _dur in rows} == {"hot-0", "hot-1"}
    # together they hold both siblings (each may stay on one: the exclusive preset no longer
    # preempts, so neither is pushed across), and each runs mostly on the layer's core
    used = {cpu for _thread, cpu, _dur in rows}
    assert hot_cpus <= used, f"hot threads ran on {sorted(used)}, not on both siblings {sorted(hot_cpus)}"
    for name in ("hot-0", "hot-1"):
        share = share_on(rows, name, hot_cpus)
        print(f"{name}: {share:.1%} of its CPU time on the exclusive core")
        assert share >= MIN_SHARE, f"{name}: only {share:.1%} on the exclusive core"
    assert run["stop"]["rc"] == 0 and run["after"]["state"] == "disabled"


def test_lint_capture_flags_the_observed_collision(trained, smt_run):
    done = threadwise(
        "lint", str(trained[1]), "--shape", GUEST_SHAPE,
        "--capture", str(smt_run["_out"] / "under.duckdb"), "--json",
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    observed = [
        finding
        for finding in findings(done)
        if finding["lint"] == "smt_collision" and finding["message"].startswith("observed:")
    ]
    assert observed, done.stdout
    assert set(observed[0]["threads"]) == {"hot-0", "hot-1"}
