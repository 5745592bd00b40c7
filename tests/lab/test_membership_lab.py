"""scx_layered's match map after a re-match, on the real scheduler in the lab VM (one boot).

tests/lab/guest/membership_scenarios.py applies a two-layer config and reads the map at each
step. The burst that loses entries is measured and printed, not asserted: how many are lost
depends on timing; that none stays lost after `rematch` is the claim, and that scx_layered's
own task state (threadwise-layer-of) has every matched thread placed, lost entry or not.
"""

from __future__ import annotations

import pytest

from tests.lab.labrun import run_guest_script

pytestmark = [pytest.mark.lab, pytest.mark.slow]
CROWD = 0  # the config's first layer


@pytest.fixture(scope="module")
def results() -> dict:
    _result, data = run_guest_script("membership_scenarios.py", label="membership")
    assert data["apply"]["rc"] == 0, data["apply"]["stderr"]
    return data


def present(found: dict[str, int | None]) -> int:
    return sum(1 for layer in found.values() if layer == CROWD)


def test_every_thread_of_a_process_is_matched_after_rematch(results: dict) -> None:
    print(f"crowd in the map 3 s after the attach: {present(results['crowd_after_attach'])} of 60")
    after = results["crowd_after_rematch"]
    assert len(after) == 60
    assert present(after) == 60, {comm: layer for comm, layer in after.items() if layer != CROWD}


def test_a_spinner_renamed_after_its_match_moves_to_its_layer(results: dict) -> None:
    print(f"tw-late before the re-match: {results['late_before']}")
    assert results["late_after"] == {"tw-late": CROWD}


def test_the_stop_continue_burst_is_measured(results: dict) -> None:
    burst = results["burst_after_stop_continue"]
    assert len(burst) == 100
    print(f"100 blocked threads after one SIGSTOP/SIGCONT: {present(burst)} in the map; "
          f"after rematch (they never wake): {present(results['burst_after_rematch'])}")
    assert results["stop_rc"] == 0


def test_the_task_state_shows_every_placed_thread_the_map_lost(results: dict) -> None:
    assert results["reader"], "threadwise-layer-of is not built: read_placement fell back to the map"
    # the burst's threads all ran (SIGCONT woke them) and were all matched: scx_layered's task
    # state has each in its layer, whatever the debug map kept
    burst = results["burst_placed_after_stop_continue"]
    assert len(burst) == 100
    assert present(burst) == 100, {comm: layer for comm, layer in burst.items() if layer != CROWD}
    crowd = results["crowd_placed_after_attach"]
    assert present(crowd) == 60, {comm: layer for comm, layer in crowd.items() if layer != CROWD}
