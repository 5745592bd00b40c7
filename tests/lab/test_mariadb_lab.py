"""The bundled mariadb workload trains in the lab: Debian's MariaDB under sysbench oltp_read_write.

One short real training (observe on the host, the synthesized profile against the default
scheduler with the A/A arm interleaved, no refinement step) in the sched_ext lab VM (TCG,
2 vCPUs), in the default self-contained guest (initramfs): it carries mariadbd with the error
messages its --lc-messages-dir names and sysbench with its Lua tests (/usr/share/sysbench, which
`require` each other; runtime/lab/carry.py DATA_TREES), and both write only under the guest's
own /tmp. The service's prepare step (sysbench prepare) runs
once in the guest before the first cell; every cell must measure (sysbench's report parsed, the
service alive), every `mariadbd` thread must be selected by a group of the profile and sit in
its layer, and the record must recompute. Every check reads the ladder file the training wrote.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from tests.lab.bundle_training import Trained, check_cells_measure_and_threads_sit, train_briefly
from tests.refine.recompute import recompute_ladder_file
from threadwise.refine.measure.bundled import build

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").is_file():
        pytest.skip("needs mariadbd: apt-get install mariadb-server (scripts/setup-system.sh)")
    if shutil.which("sysbench") is None:
        pytest.skip("needs sysbench: apt-get install sysbench (scripts/setup-system.sh)")
    build("spin")
    return train_briefly(tmp_path_factory, "mariadb", "tests/lab/test_mariadb_lab.py")


def test_every_mariadbd_thread_is_selected_by_a_group_built_from_their_evidence(trained: Trained):
    """All threads are named `mariadbd`, so a name cannot split them: the profile either splits
    them by behaviour (an AvgRuntime matcher beside the name) or keeps them in one group. What
    must hold is that the first group whose name matcher covers `mariadbd` was built from
    mariadbd's own evidence, and is not the workload's catch-all."""
    profile = trained.profile
    groups = tomllib.loads(profile.read_text())["group"]
    first = next((g for g in groups if "mariadbd".startswith(tuple(m.rstrip("*") for m in g["match"]))),
                 None)
    assert first is not None and first["match"] != ["*"], groups
    assert "mariadbd" in first["evidence"]["names"], first


def test_every_cell_measures_and_the_threads_sit_in_their_layer(trained: Trained):
    members = check_cells_measure_and_threads_sit(trained.record, ("transactions_per_s", "lat_p99_ms"))
    assert [m for m in members if m[1] == "mariadbd"], members


def test_every_decision_recomputes_from_the_recorded_numbers(trained: Trained):
    assert recompute_ladder_file(trained.record / "ladder.duckdb") > 0
