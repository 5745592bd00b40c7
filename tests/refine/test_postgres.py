"""The bundled postgres workload against Debian's real PostgreSQL 15 and sysbench, on this host.

As tests/refine/test_mariadb.py does for MariaDB: the bundled file, on a free loopback port
instead of its 5499, run by the observation's RunningService. It checks what a ladder relies on:
initdb as the user `postgres` into a fresh directory, the prepared table there for every window,
a window that parses into the objective, the directory gone with the server, and that every
process of the server is `postgres` with a title that names its role (what its profile selects).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import pgserve
from tests.conftest import _free_port
from threadwise.analyze.titles import title_pattern
from threadwise.observe.titles import read_title
from threadwise.refine.measure.metrics import parse_metrics
from threadwise.refine.measure.service import RunningService
from threadwise.refine.measure.workload import Workload, bundled_workload_path, parse_workload, render_argv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(autouse=True)
def _needs_postgres_and_sysbench() -> None:
    reason = pgserve.missing()
    if reason:
        pytest.skip(reason)
    drivers = subprocess.run(["sysbench", "--help"], capture_output=True, text=True, check=False).stdout
    if "pgsql" not in drivers:
        pytest.skip("needs sysbench with its pgsql driver: run scripts/setup-system.sh")


def bundled_on(port: int) -> Workload:
    text = bundled_workload_path("postgres").read_text().replace("5499", str(port))
    return parse_workload(text, "postgres.toml")


def test_the_service_is_prepared_once_and_a_window_parses_into_the_objective(tmp_path: Path):
    workload = bundled_on(_free_port())
    work = tmp_path / "work"
    work.mkdir()
    with RunningService(workload, work) as service:
        # pytest's tmp_path is root's alone: the script falls back to /tmp, and says where
        said = (work / "service.err").read_text()
        made = Path(said.split("fresh-postgres: data in ", 1)[1].split()[0])
        assert (made / "data" / "PG_VERSION").read_text().strip() == "15"
        assert "Creating table 'sbtest1'" in (work / "prepare.log").read_text()
        done = subprocess.run(render_argv(workload.load.command or [], window_s=2.0), capture_output=True,
                              text=True, timeout=120, check=False)
        assert service.process is not None
        shell = service.process.pid
        [postmaster] = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        roles = {title_pattern(read_title(pid), "postgres") for pid in pgserve.children(int(postmaster))}
    assert done.returncode == 0, done.stderr
    values = parse_metrics(workload.load.parser, done.stdout, source=workload.load.source)
    assert values["transactions_per_s"] > 0 and values["lat_p99_ms"] >= values["lat_min_ms"] > 0
    assert {"postgres: checkpointer", "postgres: walwriter", "postgres: background writer"} <= roles, roles
    assert not made.exists(), "the server's directory outlived it"
