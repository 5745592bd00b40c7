"""The bundled mariadb workload against Debian's real MariaDB and sysbench, on this host.

The workload's numbers come from sysbench's final report, and its data from the service's
prepare step (`sysbench prepare`), run once when mariadbd is ready. These tests run the bundled
file, on a free loopback port instead of its 3399 (a training may be using that one), through
the two places that run a service: the observation's RunningService and the guest agent (a host
A/A ladder, which needs no sched_ext). They check what a ladder relies on: the prepared table is
there for every window, a window parses into the objective, the fresh data directory goes away
with the server, and a prepare that fails stops everything with its own error.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import _free_port
from threadwise.errors import LadderIncomplete, ServiceError
from threadwise.observe import procfs
from threadwise.refine.measure import store
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.ladder import AA_ARM, BASELINE, Arm
from threadwise.refine.measure.metrics import parse_metrics
from threadwise.refine.measure.run import run_ladder, where
from threadwise.refine.measure.service import RunningService
from threadwise.refine.measure.workload import Workload, bundled_workload_path, parse_workload, render_argv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(autouse=True)
def _needs_mariadb_and_sysbench() -> None:
    if not Path("/usr/sbin/mariadbd").is_file() or shutil.which("sysbench") is None:
        pytest.skip("needs mariadb-server and sysbench: run scripts/setup-system.sh")


def bundled_on(port: int, *, prepare_port: int | None = None) -> tuple[Workload, str]:
    """The bundled workload file with its server (and its prepare, or `prepare_port`) on `port`."""
    text = bundled_workload_path("mariadb").read_text().replace("3399", str(port))
    if prepare_port is not None:
        prepare = text.index("prepare = [")
        rest = text[prepare:].replace(f"--mysql-port={port}", f"--mysql-port={prepare_port}", 1)
        text = text[:prepare] + rest
    return parse_workload(text, "mariadb.toml"), text


def fresh_datadirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("threadwise-mariadb.*"))


def server_socket(service: RunningService) -> Path:
    """The --socket path the wrapper gave mariadbd (its one child)."""
    assert service.process is not None
    shell = service.process.pid
    [child] = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
    argv = Path(f"/proc/{child}/cmdline").read_bytes().decode().split("\0")
    return Path(next(arg.split("=", 1)[1] for arg in argv if arg.startswith("--socket=")))


def test_the_service_is_prepared_once_and_a_window_parses_into_the_objective(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    # where fresh-mariadb.sh makes its data directory: deep enough that a socket there would pass
    # the 107 bytes a Unix socket's path holds (pytest-xdist's tmp paths did)
    deep = tmp_path / ("deep-" + "d" * 90)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    workload, _text = bundled_on(_free_port())
    work = tmp_path / "work"
    work.mkdir()
    with RunningService(workload, work) as service:
        [datadir] = fresh_datadirs(deep)
        assert (datadir / "sbtest").is_dir()
        socket = server_socket(service)
        assert len(str(socket)) <= 107 and socket.is_socket() and socket.parent.name.startswith("tw-sock.")
        assert "Inserting 1000 records into 'sbtest1'" in (work / "prepare.log").read_text()
        # a window as the ladder runs it (without chrt, which is the ladder's business)
        done = subprocess.run(render_argv(workload.load.command or [], window_s=2.0), capture_output=True,
                              text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    values = parse_metrics(workload.load.parser, done.stdout, source=workload.load.source)
    assert values["transactions_per_s"] > 0 and values["lat_p99_ms"] >= values["lat_min_ms"] > 0
    assert values["queries_per_s"] > values["transactions_per_s"]   # oltp_read_write: 18-20 a transaction
    assert fresh_datadirs(deep) == [], "the server's data directory outlived it"
    assert not socket.parent.exists(), "the socket's directory outlived the server"
    assert "Shutdown complete" in (work / "service.err").read_text()


def test_a_failed_prepare_stops_the_service_with_its_own_error(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    workload, _text = bundled_on(_free_port(), prepare_port=_free_port())   # nothing listens there
    work = tmp_path / "work"
    work.mkdir()
    service = RunningService(workload, work)
    with pytest.raises(ServiceError) as caught:
        service.start()
    assert "the prepare command exited with status 1" in caught.value.message
    assert "Can't connect" in caught.value.message
    assert service.process is not None and service.process.poll() is not None   # stopped, by its PID
    assert fresh_datadirs(tmp_path) == []


def test_the_guest_agent_prepares_before_the_first_cell_and_every_cell_measures(tmp_path: Path):
    """An A/A ladder on this host through the real POSIX-sh agent (no scheduler attached): the
    agent runs prepare_cmd once the service is ready; a window without the prepared table would
    fail sysbench and leave its cell without a number."""
    build("spin")
    workload, text = bundled_on(_free_port())
    workload = workload.with_window(2.0)
    ladder_file = tmp_path / "aa.duckdb"
    run_ladder(workload, text, [Arm(BASELINE), Arm(AA_ARM)], ladder_file=ladder_file,
               place=where(False, 2, profiles=False), levels=[0], repeats=2, command="pytest",
               keep_raw=tmp_path / "raw", progress=lambda _line: None)
    con = store.open_ladder(ladder_file, read_only=True)
    try:
        cells = con.execute("SELECT idx, valid, reasons FROM cell ORDER BY idx").fetchall()
        tps = con.execute("SELECT count(*), min(value) FROM sample WHERE metric = 'transactions_per_s'"
                          ).fetchone()
    finally:
        con.close()
    assert len(cells) == 4 and all(valid for _idx, valid, _reasons in cells), cells
    assert tps[0] == 4 and tps[1] > 0, tps
    agent_log = next((tmp_path / "raw").rglob("agent.log")).read_text()
    assert agent_log.count("service: prepared after") == 1
    assert agent_log.index("service: prepared after") < agent_log.index("cell ")


def test_a_failed_prepare_stops_the_ladder_before_any_cell_with_the_commands_stderr(tmp_path: Path):
    build("spin")
    port = _free_port()
    workload, text = bundled_on(port, prepare_port=_free_port())
    with pytest.raises(LadderIncomplete) as stopped:
        run_ladder(workload.with_window(2.0), text, [Arm(BASELINE), Arm(AA_ARM)],
                   ladder_file=tmp_path / "never.duckdb", place=where(False, 2, profiles=False), levels=[0],
                   repeats=1, command="pytest", keep_raw=tmp_path / "raw", progress=lambda _line: None)
    message = stopped.value.message
    assert "stopped after 0 of 2 cells (service-prepare-failed)" in message
    assert "the prepare command's stdout ends:" in message and "Can't connect" in message
    # the agent stopped the ready server by its PID before it gave up (it outlived the run before)
    left = _pids_with_argument(f"--port={port}")
    assert not left, left


def _pids_with_argument(argument: str) -> list[int]:
    """Live processes whose command line holds `argument` (read from /proc, never killed here)."""
    found = []
    for pid in procfs.all_pids():
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue   # exited meanwhile
        if argument.encode() in words:
            found.append(pid)
    return found
