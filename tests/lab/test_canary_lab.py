"""`threadwise canary` on a live service in the lab VM (one boot, five canaries; TCG, 2 vCPUs).

tests/lab/guest/canary_scenarios.py runs the real CLI inside the guest, a sched_ext host, against a
service it started (rolesim, its report lines the probe; or Redis); each canary's outcome, pairs
and time are printed. What must hold every time:
- a profile that starves the workers (a ladder measured their p99 3.8-6.2x worse at bg 0) is
  never kept: measured through the real switch and probe, it is rolled back as worse, or as no
  benefit at its 90-s cap; the default scheduler confirmed;
- the committed profiles/redis.toml (its record of 2026-12-06: get_rps 2.09x better at bg 2), on
  Redis with two spinners the test starts and redis-benchmark as the probe, is never called worse: it is kept
  (attached until `threadwise stop`), or undecided at its 90-s cap and rolled back, or rolled
  back because the guest kernel ejected scx_layered (its watchdogs; the reason must say so);
- the catch-all alone (the nearest a live canary gets to A/A) is never called better;
- a canary SIGKILLed while its profile is attached cannot roll back: the supervisor, which it
  held the profile through (runtime/holder.py), stops scx_layered;
- SIGTERM rolls back before the canary exits (130).
That a helpful profile is kept, and a harmful one rolled back as worse rather than at its cap, is
a matter of power under TCG, not of correctness, so those are printed, not asserted (the keep path
itself is asserted with a stand-in in tests/refine/test_canary_run.py). Measured on 2026-11-28:
the starving profile rolled back as worse after 12, 12 and 23 pairs (182-236 s, 10% margin); the
Redis profile kept after 11 pairs (177 s); rolesim's hot-0 on a CPU of its own under two spinners
kept after 9 and 13 pairs (158 s, 251 s); the catch-all undecided after 12-18 pairs (2-3 min).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests import datafiles
from tests.lab.labrun import run_guest_script
from threadwise.refine.measure.bundled import build

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "benchmarks" / "data" / "rolesim-worker-nopreempt.toml"
GOOD = datafiles.OLD_ROLESIM_PROFILE   # what the signal cases hold
REDIS = ROOT / "profiles" / "redis.toml"
CATCH_ALL = ROOT / "tests" / "data" / "lab" / "canary-catch-all.toml"


@pytest.fixture(scope="module")
def canaries():
    _result, data = run_guest_script("canary_scenarios.py", str(build("rolesim")), str(BAD), str(GOOD),
                                     str(CATCH_ALL), str(REDIS), "bad", "redis", "catch_all", "killed",
                                     "terminated", label="canary", timeout_s=1500)
    return data


def ran(data: dict, name: str) -> dict:
    part = data.get(name)
    assert part is not None, f"canary {name} did not run"
    assert "error" not in part, part["error"]
    record = data["_out"] / f"{name}.duckdb"
    with duckdb.connect(str(record), read_only=True) as con:
        outcome, reason = con.execute("SELECT outcome, reason FROM canary").fetchone()
        windows = con.execute("SELECT count(*) FROM canary_window").fetchone()[0]
    print(f"\ncanary {name}: {outcome} after {part['seconds']} s (TCG), {windows} windows: {reason}")
    part["outcome"], part["windows"] = outcome, windows
    return part


def test_a_profile_that_starves_the_workers_is_measured_and_never_kept(canaries):
    part = ran(canaries, "bad")
    assert part["rc"] == 13 and part["outcome"] in ("rolled_back", "no_decision"), part["stderr"][-2000:]
    assert part["state_after"] == "disabled"
    said = part["stderr"] + part["stdout"]
    assert "pair 4:" in said, "fewer than 4 pairs measured: " + said[-2000:]
    if part["outcome"] == "rolled_back":
        assert "worse" in part["stderr"], part["stderr"][-2000:]


# what the guest kernel ejects a scheduler for without judging the profile: its watchdogs (a
# runnable task stall; "runtime error" carries the RCU stall detector's ejection)
KERNEL_EJECTIONS = ("error", "error_stall")


def ejected_by_the_kernel(part: dict) -> str | None:
    """The exit kind and message when a canary was rolled back because the guest kernel ejected
    scx_layered in a profile window (not a judgement: the canary must say so), else None."""
    state = json.loads(part["run_files"].get("state.json", "{}"))
    exit_ = state.get("exit") or {}
    if state.get("phase") != "failed" or exit_.get("kind") not in KERNEL_EJECTIONS:
        return None
    return f"{exit_['kind']}: {exit_['message']}"


def test_the_committed_redis_profile_under_background_is_never_rolled_back_as_worse(canaries):
    part = ran(canaries, "redis")
    if part["outcome"] == "rolled_back":
        # CI, 2026-12-01: the guest kernel ejected scx_layered after 10 pairs (an RCU stall: khugepaged
        # runnable for 19.6 s on the CPUs the exclusive group leaves, with TSC demoted to HPET); the
        # canary must roll that back and say it was the kernel, never that the profile was worse
        ejection = ejected_by_the_kernel(part)
        assert ejection is not None, part["stderr"][-2000:] + json.dumps(part["run_files"])[:3000]
        print(f"canary redis: rolled back because the kernel ejected scx_layered ({ejection})")
        assert "not running in a profile window" in part["stderr"] and "worse" not in part["stderr"]
        assert f"scx_layered ended: {ejection.split(': ', 1)[0]}" in part["stderr"], part["stderr"][-2000:]
        assert part["rc"] == 13 and part["state_after"] == "disabled"
        return
    assert part["outcome"] in ("kept", "no_decision"), part["stderr"][-2000:]
    if part["outcome"] == "kept":
        assert part["rc"] == 0, part["stderr"][-2000:]
        state = json.loads(part["run_files"].get("state.json", "{}"))
        if part["state_after"] == "enabled":
            assert part["state_after_stop"] == "disabled"   # `threadwise stop` ends a kept profile
        else:
            # kept, then gone before it was looked at: only scx_layered's own end (the kernel ejected
            # it: a stall under TCG) may explain that; the holder stopping a kept profile is a bug
            print(f"canary redis: kept, then ended on its own: {state.get('exit')}")
            assert state.get("phase") == "failed" and "stop_reason" not in state, part["run_files"]
    else:
        assert part["rc"] == 13 and part["state_after"] == "disabled"


def test_the_catch_all_alone_is_never_called_better(canaries):
    part = ran(canaries, "catch_all")
    assert part["outcome"] in ("no_decision", "rolled_back"), part["stderr"][-2000:]
    assert part["rc"] == 13 and part["state_after"] == "disabled"


def test_a_canary_killed_mid_trial_leaves_the_default_scheduler(canaries):
    part = canaries["killed"]
    assert "error" not in part, part["error"]
    print(f"\ncanary killed: attached after {part['attached_after']} s, disabled "
          f"{part['disabled_after']} s after the SIGKILL")
    assert part["attached_after"] is not None, part["stdout"][-2000:]
    assert part["rc"] == -9 and part["disabled_after"] is not None and part["state_after"] == "disabled"
    state = json.loads(part["run_files"].get("state.json", "{}"))
    assert "ended without a decision" in state.get("stop_reason", ""), part["run_files"]


def test_sigterm_rolls_back_before_the_canary_exits(canaries):
    part = canaries["terminated"]
    assert "error" not in part, part["error"]
    assert part["attached_after"] is not None, part["stdout"][-2000:]
    # signals_after: the canary's signal masks and threads when it had not exited 150 s after the signal
    assert part["rc"] == 130, (part.get("signals_after"), part["stdout"][-2000:])
    # read at once after it exited: the rollback came first
    assert part["disabled_after"] is not None and part["disabled_after"] < 1, part["disabled_after"]
    assert "interrupted" in part["stdout"] and "rolled back" in part["stdout"], part["stdout"][-2000:]
