"""The runtime on the real scx_layered in the lab VM (one boot, five scenarios).

tests/lab/guest/runtime_scenarios.py runs inside the guest through the real
CLI; these tests assert on what it recorded.
"""

from __future__ import annotations

import pytest

from tests.lab.labrun import run_guest_script

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def scenarios():
    _result, data = run_guest_script("runtime_scenarios.py", label="runtime")
    return data


def scenario(data: dict, name: str) -> dict:
    part = data.get(name)
    assert part is not None, f"scenario {name} did not run"
    assert "error" not in part, part.get("error")
    return part


def test_apply_shows_tasks_per_layer_then_stop_disables(scenarios):
    part = scenario(scenarios, "apply_stats_stop")
    applied = part["apply"]
    assert applied["rc"] == 0, applied["stderr"]
    assert applied["json"]["phase"] == "attached"
    assert applied["json"]["ops"].startswith("layered_1.1.4")
    print(f"attach took {applied['json']['attach_s']:.1f} s (TCG, 2 vCPUs)")
    status = part["status"]
    assert status["rc"] == 0, status["stderr"]
    layers = {layer["name"]: layer for layer in status["json"]["layers"]}
    assert set(layers) == {"hot", "rest"}
    assert layers["hot"]["tasks"] >= 1 and layers["rest"]["tasks"] >= 1
    # the spinner, on the layer's one CPU: measured from its CPU time (scx_layered 1.1.4's own
    # figure read 692.5% for one busy CPU, runtime/stats.py)
    assert layers["hot"]["util_source"] == "threads"
    assert 50 < layers["hot"]["util_pct"] <= 105
    assert len(layers["hot"]["cpus"]) == 1
    assert part["spinner_ext_enabled"] and part["spinner_ext_enabled"][0].split()[-1] == "1"
    stopped = part["stop"]
    assert stopped["rc"] == 0, stopped["stderr"]
    assert stopped["json"]["stopped"] and stopped["json"]["state_after"] == "disabled"
    assert stopped["json"]["last"]["exit"]["kind"] == "unreg"
    assert part["after"]["state"] == "disabled"


def test_refused_config_is_a_load_failure_and_nothing_attached(scenarios):
    part = scenario(scenarios, "refused")
    applied = part["apply"]
    assert applied["rc"] == 1
    assert "did not attach: load_failure" in applied["stderr"]
    assert "must have an empty match" in applied["stderr"]
    assert "nothing is attached" in applied["stderr"]
    assert part["after"]["state"] == "disabled"
    assert part["state"]["phase"] == "failed"
    assert "attached_at" not in part["state"]


def test_kill_9_is_noticed_reported_and_disabled(scenarios):
    part = scenario(scenarios, "kill_9")
    assert part["apply"]["rc"] == 0, part["apply"]["stderr"]
    assert part["before"]["state"] == "enabled"
    noticed = part["noticed"]
    assert noticed["phase"] == "failed"
    assert noticed["exit"]["kind"] == "killed"
    assert noticed["state_after"] == "disabled"
    status = part["status"]
    assert status["rc"] == 1  # the runtime reports the failure, non-zero
    assert "killed" in status["stderr"] and "SIGKILL" in status["stderr"]
    assert part["after"]["state"] == "disabled"


def test_killed_supervisor_takes_scx_layered_down(scenarios):
    part = scenario(scenarios, "supervisor_killed")
    assert part["apply"]["rc"] == 0, part["apply"]["stderr"]
    assert part["again"]["rc"] == 2 and "already applied" in part["again"]["stderr"]
    assert part["after"]["state"] == "disabled"  # PR_SET_PDEATHSIG -> SIGINT -> unregistered
    assert part["scx_gone"]
    assert part["status"]["rc"] == 1 and "supervisor is gone" in part["status"]["stderr"]
    assert part["stop"]["rc"] == 0 and part["stop"]["json"]["state_after"] == "disabled"


def test_kernel_ejection_by_sysrq_is_reported_with_its_kind(scenarios):
    part = scenario(scenarios, "sysrq")
    assert part["apply"]["rc"] == 0, part["apply"]["stderr"]
    noticed = part["noticed"]
    assert noticed["phase"] == "failed"
    assert noticed["exit"]["kind"] == "sysrq", noticed["exit"]
    assert "disabled by sysrq-S" in noticed["exit"]["message"]
    assert any("sysrq" in line for line in noticed["kernel_log"]), noticed["kernel_log"]
    assert part["status"]["rc"] == 1 and "sysrq" in part["status"]["stderr"]
    assert part["after"]["state"] == "disabled"
