"""The self-contained initramfs guest (runtime/lab/initramfs.py).

Fast: the TCP readiness probe it relies on (busybox nc), the plan parser, the refusal of an
unpackable interpreter, the console protocol (a damaged payload is kept out). Lab (boots qemu,
TCG): a two-arm, two-level ladder of the bundled rolesim runs in one initramfs boot and every raw
file the vng lab would leave comes back through the serial console.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests import datafiles
from threadwise.errors import MissingTool
from threadwise.runtime.lab import carry, initramfs

BUSYBOX = shutil.which("busybox")
SHAPE = "cores=2,threads-per-core=1"

# The bundled rolesim, smaller and with a short window, so the VM part stays near a minute.
WORKLOAD = datafiles.text("refine/initramfs-workload.toml")

PROFILE = datafiles.text("refine/initramfs-profile.toml")


@pytest.mark.skipif(BUSYBOX is None, reason="needs busybox: apt-get install busybox-static")
def test_busybox_nc_probe_says_whether_a_port_listens_without_waiting_for_the_server():
    from threadwise.refine.measure.ladder import _function

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)  # accepts into the backlog, never answers nor hangs up
        port = server.getsockname()[1]
        probe = ["busybox", "nc", "-w", "1", "127.0.0.1", str(port), "-e", "true"]
        started = time.monotonic()
        assert subprocess.run(probe, stdin=subprocess.DEVNULL, check=False).returncode == 0
        assert time.monotonic() - started < 2
    refused = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    assert refused.returncode != 0
    # the rendering ladder.plan_script(tcp_probe="nc") uses is exactly this argv
    assert _function("ready_cmd", probe) == f"ready_cmd() {{ busybox nc -w 1 127.0.0.1 {port} -e true; }}"


def test_plan_commands_reads_functions_and_variables_as_plan_sh_spells_them():
    text = ("SPIN=/opt/x/spin\nSCX='/a b/scx_layered'\nATTACH_MODE=direct\n"
            "service_cmd() { /usr/bin/redis-server --port 6399 --save ''; }\n"
            "ready_cmd() { grep -qF -- 'ready now' \"$OUT/service.log\" \"$OUT/service.err\"; }\n")
    words = initramfs.plan_commands(text)
    assert words["SPIN"] == ["/opt/x/spin"] and words["SCX"] == ["/a b/scx_layered"]
    assert words["service_cmd"] == ["/usr/bin/redis-server", "--port", "6399", "--save", ""]
    assert words["ready_cmd"][:3] == ["grep", "-qF", "--"]
    assert words["ATTACH_MODE"] == ["direct"]
    # what the shell runs itself is not a program to pack
    assert initramfs.program_argv(["exec", "A=1", "env", "B=2", "/x/y", "-v"]) == ["/x/y", "-v"]


@pytest.mark.skipif(BUSYBOX is None, reason="needs busybox: apt-get install busybox-static")
def test_an_interpreter_without_a_known_tree_is_refused_by_name(tmp_path: Path):
    perl = shutil.which("perl") or "/usr/bin/perl"   # Debian's perl-base: always there
    (tmp_path / "plan.sh").write_text(
        f"SPIN=/bin/true\nSCX=/bin/true\nATTACH_MODE=direct\n"
        f"ready_cmd() {{ {perl} -e 'exit 0' 6399; }}\n")
    with pytest.raises(initramfs.InitramfsError, match="interpreter") as refused:
        initramfs.pack(tmp_path, dest=tmp_path / "img")
    assert perl in refused.value.message
    hint = refused.value.hint or ""   # what a user does, not an internal API (issue 21)
    assert "compiled program, a POSIX shell script" in hint and "--guest vng" in hint
    assert "a JVM or Python service" in hint
    assert "plan_script" not in hint and "tcp_probe" not in hint


@pytest.mark.skipif(shutil.which("sysbench") is None or not Path("/usr/share/sysbench").is_dir(),
                    reason="needs sysbench: apt-get install sysbench (scripts/setup-system.sh)")
def test_a_program_with_a_data_tree_of_its_own_carries_it_to_the_runtime_disk():
    """sysbench reads its Lua tests from /usr/share/sysbench, which no argument names: without
    the tree, `sysbench oltp_read_write prepare` fails in the guest after the check passed."""
    packer = carry.Packer(carry.Image(), frozenset())
    carry.carry_command(packer, ["sysbench", "oltp_read_write", "--tables=1", "prepare"], why="prepare_cmd")
    assert [t.path for t in packer.trees] == ["/usr/share/sysbench"], packer.trees
    assert any(path.endswith("/sysbench") for path in packer.packed), packer.packed
    other = carry.Packer(carry.Image(), frozenset())
    carry.carry_command(other, ["/bin/true"], why="load_cmd")
    assert other.trees == []


def test_runtime_attach_mode_is_refused(tmp_path: Path):
    (tmp_path / "plan.sh").write_text("ATTACH_MODE=runtime\nSCX=/bin/true\n")
    with pytest.raises(initramfs.InitramfsError, match="ATTACH_MODE=runtime") as refused:
        initramfs.pack(tmp_path, dest=tmp_path / "img")
    assert "attach_mode='direct'" in (refused.value.hint or "")


def _payload(files: dict[str, str]) -> tuple[str, list[str]]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    data = buffer.getvalue()
    lines = base64.encodebytes(data).decode().split()
    return f"{hashlib.md5(data).hexdigest()} {len(data)}", lines


def test_console_unpacks_good_payloads_and_keeps_damaged_ones_out(tmp_path: Path):
    seen: list[str] = []
    console = initramfs.Console(tmp_path, seen.append)
    good, good_lines = _payload({"cells/0/done": "ok\n", "agent.log": "agent: cell 0: done (0)\n"})
    bad, bad_lines = _payload({"cells/1/done": "ok\n"})
    bad_lines[0] = bad_lines[0][:-4] + "AAAA"  # a byte changed on the way
    stream = ["TWINIT: release=7.3.4 cpus=8\r\n", "[ 1.0] some kernel line\n",
              "TWAGENT: agent: cell 0: done (0)\n", f"TWCELL-BEGIN 0 {good}\n", *good_lines,
              "TWCELL-END 0 \n", f"TWCELL-BEGIN 1 {bad}\n", *bad_lines, "TWCELL-END 1 \n",
              "TWSTATUS: 4\n"]
    for line in stream:
        console.feed(line)
    assert (console.release, console.cpus, console.status) == ("7.3.4", 8, 4)
    assert console.cells == ["0"] and console.damaged == ["cell 1"] and not console.archive
    assert (tmp_path / "cells/0/done").read_text() == "ok\n" and not (tmp_path / "cells/1").exists()
    assert "agent: cell 0: done (0)" in seen
    assert "last agent line: 'agent: cell 0: done (0)'" in console.where_stopped()


def test_the_host_can_stop_the_run_after_a_cell_and_keeps_what_came_back(tmp_path: Path):
    """Early stop: after each cell the host is asked; a sentence ends the run there."""
    asked: list[str] = []

    def decide(name: str) -> str | None:
        asked.append(name)
        return "lost clearly" if name == "1" else None

    console = initramfs.Console(tmp_path, lambda _line: None, on_cell=decide)
    for idx in ("0", "1", "2"):
        header, lines = _payload({f"cells/{idx}/cell": f"{idx}\n"})
        for line in (f"TWCELL-BEGIN {idx} {header}\n", *lines, f"TWCELL-END {idx} \n"):
            console.feed(line)
    assert asked == ["0", "1"]  # once decided, the host asks no more
    assert console.stop_reason == "lost clearly" and console.cells == ["0", "1", "2"]


def test_interim_counts_only_repeats_whose_every_cell_is_back(tmp_path: Path):
    from threadwise.refine.measure.plan import Arm, make_plan
    from threadwise.refine.measure.run import _Interim
    from threadwise.refine.measure.workload import bundled_workload_path, load_workload

    plan = make_plan(load_workload(bundled_workload_path("rolesim")), [Arm("baseline"), Arm("baseline-aa")],
                     levels=[0, 2], repeats=3, shape="cores=2,threads-per-core=1")
    interim = _Interim(plan, tmp_path, lambda _measured: "never asked", 2)
    (tmp_path / "cells").mkdir()
    for cell in plan.cells:
        if cell.repeat == 1 or (cell.repeat == 2 and cell.arm == "baseline"):
            (tmp_path / "cells" / str(cell.idx)).mkdir()
            (tmp_path / "cells" / str(cell.idx) / "cell").write_text("")
    assert interim.complete_repeats() == 1
    assert interim("0") is None  # one repeat: no interval yet, nothing asked
    for cell in plan.cells:
        (tmp_path / "cells" / str(cell.idx)).mkdir(exist_ok=True)
        (tmp_path / "cells" / str(cell.idx) / "cell").write_text("")
    assert interim.complete_repeats() == 3
    assert interim("5") is None  # the last repeat is the run's own end: no early stop to make


def test_a_service_window_is_read_from_its_cell_before_service_log_arrives(tmp_path: Path):
    """The early-stop question reads cells as they come back; a self-reporting service's lines
    used to be cut out of service.log, which comes only with the final archive, so no cell had a
    metric then and no step of rolesim or poolservice ever stopped early (measured 2026-11-28)."""
    from threadwise.refine.measure.ingest import _metrics
    from threadwise.refine.measure.plan import Arm, make_plan
    from threadwise.refine.measure.workload import bundled_workload_path, load_workload

    plan = make_plan(load_workload(bundled_workload_path("rolesim")), [Arm("baseline")],
                     levels=[0], repeats=1, shape="cores=2,threads-per-core=1")
    report = ('{{"ts": {ts}, "interval_s": 0.5, "hot_chunks_per_s": {hot}, "items_per_s": 300.0, '
              '"worker_lat_p50_us": 150.0, "worker_lat_p99_us": {p99}}}')
    log = [report.format(ts=i, hot=1000 + i, p99=2000 + i) for i in range(10)]
    cell = tmp_path / "cells" / "0"
    cell.mkdir(parents=True)
    (cell / "service.lines").write_text("4 7\n")   # the window: lines 4, 5 and 6 (0-based)
    (cell / "service.window").write_text("\n".join(log[4:7]) + "\n")
    values, error = _metrics(plan, tmp_path, cell)   # no service.log yet: the run is still going
    assert error is None and values["hot_chunks_per_s"] == 1005 and values["worker_lat_p99_us"] == 2005
    # a raw directory from before service.window: the same window cut out of service.log
    (cell / "service.window").unlink()
    (tmp_path / "service.log").write_text("\n".join(log) + "\n")
    assert _metrics(plan, tmp_path, cell) == (values, None)


# --- lab ------------------------------------------------------------------------------------------


def _lab_missing() -> str | None:
    from threadwise.runtime.lab import kernel
    from threadwise.scx import scx_layered_path

    if not kernel.cached_kernels():
        return "lab kernel not in cache: run threadwise lab kernel"
    try:
        scx_layered_path()
    except MissingTool as missing:
        return f"scx_layered missing: {missing.hint or missing.message}"
    for tool, fix in (("qemu-system-x86_64", "run scripts/setup-system.sh"),
                      ("busybox", "apt-get install busybox-static (scripts/setup-system.sh)"),
                      ("bpftool", "apt-get install bpftool"), ("gcc", "apt-get install gcc")):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).is_file():
            return f"{tool} missing: {fix}"
    return None


@pytest.mark.lab
def test_a_ladder_runs_in_one_initramfs_boot_and_its_raw_files_come_back(tmp_path: Path):
    reason = _lab_missing()
    if reason:
        pytest.skip(reason)
    from threadwise.refine.measure import ingest, ladder, store
    from threadwise.refine.measure.bundled import build
    from threadwise.refine.measure.ladder import BASELINE, Arm
    from threadwise.refine.measure.run import arm_from_file
    from threadwise.refine.measure.workload import parse_workload
    from threadwise.runtime.membership import parse_map_dump
    from threadwise.scx import SCX_LAYERED_VERSION, scx_layered_path
    from threadwise.shape import parse_shape

    workload = parse_workload(WORKLOAD)
    profile = tmp_path / "tiny.toml"
    profile.write_text(PROFILE)
    arms = [Arm(BASELINE), arm_from_file(profile, parse_shape(SHAPE))]
    plan = ladder.make_plan(workload, arms, levels=[0, 1], repeats=1, shape=SHAPE, workload_toml=WORKLOAD)
    out = tmp_path / "run"
    out.mkdir()
    script = ladder.plan_script(plan, attach_mode="direct", spin=build("spin"), scx=scx_layered_path(),
                                tcp_probe="nc")
    ladder.write_plan(plan, out, script)
    lines: list[str] = []
    started = time.monotonic()
    execution = ladder.execute(out, lab=True, cpus=2, timeout_s=300, progress=lines.append,
                               guest="initramfs")
    wall = time.monotonic() - started
    print(f"initramfs ladder: {wall:.0f} s wall", *lines, sep="\n  ")
    assert execution.status == 0, (out / "agent.log").read_text()
    assert execution.tcg and execution.vcpus == 2 and execution.guest_kernel
    # streamed while running, and the same lines in the agent.log that came back
    # (agent lines carry the guest's uptime: "agent: [12.34] attach tiny: attached ...")
    assert any(re.match(r"agent: \[[\d.]+\] attach tiny: attached", line) for line in lines), lines
    assert (out / "finished").is_file()
    assert re.search(r"^agent: \[[\d.]+\] finished$", (out / "agent.log").read_text(), re.M)

    for cell in plan.cells:
        directory = out / "cells" / str(cell.idx)
        assert (directory / "done").is_file(), f"cell {cell.idx} did not come back"
        state = (directory / "state.before").read_text().split()
        if cell.arm == BASELINE:
            assert state[0] == "disabled"
        else:
            assert state[0] == "enabled" and state[1].startswith("layered_"), state
            layer_of = parse_map_dump((directory / "membership.json").read_text())
            rows = (directory / "threads.txt").read_text().splitlines()
            threads = {comm: int(tid) for _pid, tid, comm in (row.split(maxsplit=2) for row in rows)}
            assert {"rolesim", "hot-0", "feeder", "worker-0", "housekeep"} <= set(threads)
            assert layer_of.get(threads["hot-0"]) == 0  # the profile's first layer, "hot"
        if cell.level == 1:
            assert (directory / "spin.stat.before").is_file() and (directory / "spin.stat.after").is_file()
    assert any(json.loads(line).get("hot_chunks_per_s") is not None
               for line in (out / "service.log").read_text().splitlines() if line.startswith("{"))

    # ingest reads them like the raw files of a vng run
    con = store.open_ladder(tmp_path / "ladder.duckdb")
    try:
        got = ingest.ingest(con, plan, out, execution, command="test", purpose="test",
                            scx_version=SCX_LAYERED_VERSION)
        assert got.completed and got.cells == len(plan.cells) == 4
        hot = con.execute("SELECT DISTINCT actual_layer FROM membership WHERE comm = 'hot-0'").fetchall()
        assert hot == [("hot",)]
    finally:
        con.close()
