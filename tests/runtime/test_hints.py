"""The runtime's title classifier (runtime/hints.py) on real titled processes, and its bpf(2) calls
on a real pinned map.

Processes: copies of /bin/sleep under a comm of this test's own, started with `exec -a TITLE`, so
/proc/PID/cmdline carries the title as a retitled server's does. The hint writer is a recorder
here; the task-hint map itself (BPF task storage, keyed by pidfd) exists only while scx_layered
runs, so its writes are checked in the lab (tests/lab/test_hints_lab.py). The syscall plumbing
(BPF_OBJ_GET, BPF_MAP_UPDATE_ELEM, BPF_MAP_LOOKUP_ELEM) is checked here on a hash map bpftool
pins (bpf tier: root).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import stop_by_pid
from threadwise.runtime import hints
from threadwise.runtime.hints import HintMap, HintPlan, TitleHints

PLAN_LAYERS = {1: "checkpointer", 2: "backends", 1024: "untitled"}


def plan_for(comm: str) -> HintPlan:
    return HintPlan({f"{comm}: checkpointer": 1, f"{comm}: app shop": 2}, comm, PLAN_LAYERS)


@pytest.fixture
def titled(tmp_path: Path) -> Iterator[tuple[str, dict[str, int]]]:
    """A comm of its own and three processes of it: a checkpointer, a backend, one untitled."""
    comm = f"twt{uuid.uuid4().hex[:8]}"
    binary = tmp_path / comm
    shutil.copy("/bin/sleep", binary)
    titles = {"checkpointer": f"{comm}: checkpointer", "backend": f"{comm}: app shop 127.0.0.1(4000) idle",
              "plain": comm}
    started = {name: subprocess.Popen(["bash", "-c", f'exec -a "{title}" {binary} 60'])
               for name, title in titles.items()}
    try:
        deadline = 50
        while any(Path(f"/proc/{p.pid}/comm").read_text().strip() != comm for p in started.values()):
            deadline -= 1
            assert deadline > 0, "the titled processes did not exec"
            subprocess.run(["sleep", "0.1"], check=True)
        yield comm, {name: p.pid for name, p in started.items()}
    finally:
        for process in started.values():
            stop_by_pid(process, signal.SIGTERM, 5)


def test_plan_selects_the_first_pattern_and_round_trips(tmp_path: Path):
    plan = plan_for("postgres")
    assert plan.hint_for("postgres: checkpointer") == 1
    assert plan.hint_for("postgres: app shop 127.0.0.1(51234) SELECT") == 2
    assert plan.hint_for("postgres: app shopping 127.0.0.1(1) idle") is None   # a word, not a prefix
    assert plan.hint_for(None) is None
    plan.save(tmp_path / "hints.json")
    assert HintPlan.load(tmp_path / "hints.json") == plan


def test_each_titled_process_is_hinted_once_and_the_untitled_never(titled):
    comm, pids = titled
    written: list[tuple[int, int]] = []
    classifier = TitleHints(plan_for(comm), lambda tid, hint: written.append((tid, hint)))
    placed, failed = classifier.poll()
    assert failed == []
    assert sorted(written) == sorted([(pids["checkpointer"], 1), (pids["backend"], 2)])
    by_pid = {p.pid: p for p in placed}
    assert by_pid[pids["checkpointer"]].layer == "checkpointer"
    assert by_pid[pids["backend"]].layer == "backends"
    assert all(p.why == "first seen" for p in placed)
    assert classifier.poll() == ([], [])   # nothing new: nothing written again
    assert len(written) == 2


def test_a_retitled_process_moves_and_one_that_loses_its_title_goes_to_the_default(titled, monkeypatch):
    comm, pids = titled
    written: list[tuple[int, int]] = []
    classifier = TitleHints(plan_for(comm), lambda tid, hint: written.append((tid, hint)))
    classifier.poll()
    written.clear()
    retitled = {pids["plain"]: f"{comm}: checkpointer", pids["backend"]: f"{comm}: walsender"}
    real = hints.read_title
    monkeypatch.setattr(hints, "read_title", lambda pid: retitled.get(pid) or real(pid))
    placed, _ = classifier.poll()
    assert sorted(written) == sorted([(pids["plain"], 1), (pids["backend"], 1024)])
    whys = {p.pid: p.why for p in placed}
    assert whys[pids["plain"]] == "first seen"
    assert whys[pids["backend"]] == "title changed (hint 2 before)"


def test_new_threads_of_a_hinted_process_are_written_and_a_gone_task_is_skipped(titled, monkeypatch):
    comm, pids = titled
    written: list[tuple[int, int]] = []
    gone = 999_999_999

    def write(tid: int, hint: int) -> None:
        if tid == gone:
            raise ProcessLookupError(tid)
        written.append((tid, hint))

    classifier = TitleHints(plan_for(comm), write)
    classifier.poll()
    checkpointer = pids["checkpointer"]
    real = hints.membership.process_threads
    extra = [(checkpointer + 1, "x"), (gone, "y")]
    monkeypatch.setattr(hints.membership, "process_threads",
                        lambda pid: real(pid) + (extra if pid == checkpointer else []))
    written.clear()
    placed, failed = classifier.poll()
    assert written == [(checkpointer + 1, 1)] and failed == []
    assert [(p.pid, p.tids, p.why) for p in placed] == [(checkpointer, (checkpointer + 1,), "new threads")]


def test_a_failed_write_names_the_process_and_does_not_stop_the_others(titled):
    comm, pids = titled

    def write(tid: int, hint: int) -> None:
        if tid == pids["checkpointer"]:
            raise hints.HintError(f"task {tid}: writing hint {hint}: Permission denied")

    placed, failed = TitleHints(plan_for(comm), write).poll()
    assert [p.pid for p in placed] == [pids["backend"]]
    assert len(failed) == 1 and f"pid {pids['checkpointer']} task {pids['checkpointer']}" in failed[0].message


def test_the_map_path_is_the_runs_own():
    args = ("--interval-ms", "100", "--task-hint-map", "/sys/fs/bpf/threadwise/task_hint_map")
    own = hints.own_map_path(4242)
    assert hints.with_map_path(args, own) == ("--interval-ms", "100", "--task-hint-map", str(own))
    assert hints.map_path_in(args) == Path("/sys/fs/bpf/threadwise/task_hint_map")
    assert hints.map_path_in(("--interval-ms", "100")) is None
    assert hints.bpffs_mounted("bpf /sys/fs/bpf bpf rw,nosuid 0 0\nproc /proc proc rw 0 0\n")
    assert not hints.bpffs_mounted("proc /proc proc rw 0 0\n")


@pytest.mark.bpf
def test_the_bpf_calls_update_and_look_up_a_real_pinned_map():
    if os.geteuid() != 0 or shutil.which("bpftool") is None:
        pytest.skip("needs root and bpftool (scripts/setup-system.sh)")
    pin = hints.own_map_path(os.getpid()).with_name(f"test-{uuid.uuid4().hex[:8]}")
    hints.prepare_pin(pin)
    try:
        subprocess.run(["bpftool", "map", "create", str(pin), "type", "hash", "key", "4", "value", "32",
                        "entries", "8", "name", "tw_hint_test"], check=True)
        with HintMap(pin) as hint_map:
            assert hint_map.lookup_key(5) is None
            hint_map.update_key(5, 1024)
            assert hint_map.lookup_key(5) == 1024
        lookup = ["bpftool", "-j", "map", "lookup", "pinned", str(pin), "key", "5", "0", "0", "0"]
        shown = subprocess.run(lookup, capture_output=True, text=True, check=True).stdout
        assert '"0x00","0x04"' in shown.replace(" ", "")   # 1024, little-endian, as bpftool reads it
        with pytest.raises(OSError):
            HintMap(pin.with_name("absent"))
    finally:
        hints.remove_pin(pin)
    assert not pin.exists()


TITLE_PROFILE = Path(__file__).resolve().parents[1] / "data" / "lab" / "postgres-titles.toml"


@pytest.mark.scx
def test_a_title_profile_resolves_to_the_plan_the_supervisor_follows():
    from threadwise.runtime import config as config_mod
    from threadwise.shape import synthetic

    resolved = config_mod.resolve(TITLE_PROFILE, synthetic(2))   # scx_layered's parser included
    plan = resolved.hint_plan
    assert plan is not None and plan.process == "postgres"
    assert plan.patterns == {"postgres: checkpointer": 1, "postgres: walwriter": 2,
                             "postgres: background writer": 2, "postgres: postgres postgres": 3}
    assert plan.layers == {1: "checkpointer", 2: "writers", 3: "backends", 1024: "untitled"}
    assert hints.map_path_in(resolved.scx_args) is not None


def test_membership_places_a_hinted_process_by_its_hint_and_the_rest_by_comm():
    from threadwise.runtime.membership import expected_layer
    from threadwise.shape import synthetic
    from threadwise.synthesize.api import compile_profile, load_valid

    config = compile_profile(load_valid(TITLE_PROFILE), synthetic(2)).config
    assert expected_layer(config, "postgres", "postgres", 1) == "checkpointer"
    assert expected_layer(config, "postgres", "postgres", 3) == "backends"
    assert expected_layer(config, "postgres", "postgres", 1024) == "untitled"
    assert expected_layer(config, "postgres", "postgres", None) == "postgres"   # never hinted: its comm
    assert expected_layer(config, "pgbench", "pgbench", None) == "rest"


@pytest.mark.scx
def test_a_ladder_arm_with_title_groups_carries_its_plan_and_the_initramfs_guest_refuses_it(tmp_path: Path):
    from threadwise.errors import UsageError
    from threadwise.refine.measure import ladder, run
    from threadwise.runtime import config as config_mod
    from threadwise.shape import synthetic

    arm = run.arm_from_file(TITLE_PROFILE, synthetic(2), "titled")
    plan = ladder.arm_hint_plan(arm)
    assert plan is not None and plan.layers[3] == "backends"
    assert ladder.arm_hint_plan(ladder.Arm("baseline")) is None
    with pytest.raises(UsageError, match="the initramfs guest has no runtime") as refused:
        run._refuse_title_hints([ladder.Arm("baseline"), arm])
    assert refused.value.hint is not None and "--guest vng" in refused.value.hint
    # what the vng guest's agent hands `apply --hint-plan` with the arm's .json config
    config_file, plan_file = tmp_path / "titled.json", tmp_path / "titled.hints.json"
    assert arm.config is not None
    config_file.write_text(arm.config.to_json())
    plan.save(plan_file)
    loaded = config_mod.load_input(config_file)
    assert config_mod.load_hint_plan(loaded, plan_file) == plan
    with pytest.raises(UsageError, match="a profile's title groups make their own"):
        config_mod.load_hint_plan(config_mod.load_input(TITLE_PROFILE), plan_file)
    HintPlan({"postgres: x": 7}, "postgres", {7: "nowhere"}).save(plan_file)
    with pytest.raises(UsageError, match=r"hints \[7\] select no HintEquals layer"):
        config_mod.load_hint_plan(loaded, plan_file)


def test_a_cells_titles_give_each_process_the_hint_it_earns(tmp_path: Path):
    from threadwise.refine.measure.ingest import _title_hints

    (tmp_path / "titles.txt").write_text(
        "202 /usr/lib/postgresql/15/bin/postgres -D /tmp/x/data -p 5499 \n"
        "206 postgres: checkpointer                 \n"
        "209 postgres: walwriter \n"
        "300 postgres: app shop 127.0.0.1(4000) idle \n"
        "301 \n")
    plan = HintPlan({"postgres: checkpointer": 1, "postgres: walwriter": 2, "postgres: app shop": 3},
                    "postgres", PLAN_LAYERS)
    assert _title_hints(tmp_path, plan) == {206: 1, 209: 2, 300: 3}
    assert _title_hints(tmp_path, None) is None
    assert _title_hints(tmp_path / "absent", plan) == {}


def test_a_reused_pid_is_a_new_process(titled, monkeypatch):
    comm, pids = titled
    written: list[tuple[int, int]] = []
    classifier = TitleHints(plan_for(comm), lambda tid, hint: written.append((tid, hint)))
    classifier.poll()
    written.clear()
    checkpointer = pids["checkpointer"]
    real = hints.proc_start_time
    monkeypatch.setattr(hints, "proc_start_time", lambda pid: -1 if pid == checkpointer else real(pid))
    placed, _ = classifier.poll()
    assert written == [(checkpointer, 1)]   # its tasks again: the old process's hints died with it
    assert [(p.pid, p.why) for p in placed] == [(checkpointer, "first seen")]
