"""The bundled memcached workload trains in the lab: Debian's memcached under mcload.

One short real training (observe on the host, the synthesized profile against the default
scheduler with the A/A arm interleaved, no refinement step) in the sched_ext lab VM (TCG,
2 vCPUs). memcached and the bundled generator are carried into the initramfs guest; every cell
must measure (mcload's line parsed, the generator below its CPU limit, memcached alive), the
request workers (`mc-worker`) must be selected by the profile and sit in their layer, and the
record must recompute. Every check reads the ladder file the training wrote.
"""

from __future__ import annotations

import shutil
import tomllib

import pytest

from tests.lab.bundle_training import Trained, check_cells_measure_and_threads_sit, train_briefly
from tests.refine.recompute import recompute_ladder_file
from threadwise.refine.measure.bundled import build

# One boot (step 0; no trace cell: bundle_training.untraced), levels 0 and 1 at 2 repeats, 3-s
# windows: about 2 min under TCG on a quiet 2-core host; room for a busy one.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    if shutil.which("memcached") is None:
        pytest.skip("needs memcached: apt-get install memcached (scripts/setup-system.sh)")
    build("spin")
    build("mcload")
    return train_briefly(tmp_path_factory, "memcached", "tests/lab/test_memcached_lab.py")


def test_the_profile_selects_the_request_workers(trained: Trained):
    """Which group the workers land in depends on the load the capture saw
    (docs/bundled-workloads.md "memcached"): at a 200-us think time they read as latency
    threads of their own, at 2 ms, before the request evidence, as housekeeping with the idle
    maintainers (no wake chain carries a request that arrives from the network). What must hold
    is that a group built from their evidence selects them, first (scx_layered places a thread
    in the first layer that matches it), and not the workload's catch-all."""
    profile = trained.profile
    groups = tomllib.loads(profile.read_text())["group"]
    first = next((g for g in groups if "mc-worker".startswith(tuple(m.rstrip("*") for m in g["match"]))),
                 None)
    assert first is not None and first["match"] != ["*"], groups
    assert "mc-worker" in first["evidence"]["names"], first


def test_every_cell_measures_and_the_workers_sit_in_their_layer(trained: Trained):
    members = check_cells_measure_and_threads_sit(trained.record, ("ops_per_s", "get_p99_us"))
    assert [m for m in members if m[1] == "mc-worker"], members


def test_every_decision_recomputes_from_the_recorded_numbers(trained: Trained):
    assert recompute_ladder_file(trained.record / "ladder.duckdb") > 0
