"""scx_layered stats: the socket protocol and the per-layer figures (fast tier)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

from threadwise.errors import MembershipUnavailable
from threadwise.runtime.stats import (
    cpu_ns_by_tid,
    cpus_from_mask,
    layers_from_stats,
    read_layers,
    read_sys_stats,
    utilisation,
)

SYS_STATS = {
    "at": 1.0,
    "layers": {
        "rest": {"index": 1, "tasks": 17, "util": 13.4, "cpus": [2], "is_excl": 0},
        "hot": {"index": 0, "tasks": 1, "util": 100.9, "cpus": [1], "is_excl": 1},
    },
}


def test_cpus_from_mask():
    assert cpus_from_mask([0b101]) == [0, 2]
    assert cpus_from_mask([0, 1]) == [64]
    assert cpus_from_mask([]) == []


def test_layers_sorted_by_index():
    layers = layers_from_stats(SYS_STATS)
    assert [layer.name for layer in layers] == ["hot", "rest"]
    assert layers[0].cpus == [0] and layers[0].exclusive
    assert layers[1].tasks == 17


def serve(path, answers):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    requests = []

    def run():
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            for answer in answers:
                requests.append(json.loads(stream.readline()))
                stream.write(json.dumps({"errno": 0, "args": {"resp": answer}}).encode() + b"\n")
                stream.flush()
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, requests


def test_read_layers_asks_twice_and_reports_the_second(tmp_path):
    first = {"layers": {"hot": {"index": 0, "tasks": 1, "util": 2.0, "cpus": [1]}}}
    thread, requests = serve(tmp_path / "stats", [first, SYS_STATS])
    layers = read_layers(tmp_path / "stats", interval_s=0.01, layer_map=lambda _tids: {})   # no thread placed
    thread.join(5)
    assert requests == [{"req": "stats", "args": {"target": "top"}}] * 2
    assert layers[0].tasks == 1 and layers[0].util_source == "threads"


def fake_proc(root, threads: dict[int, int]) -> None:
    """/proc/PID/task/TID/schedstat with `ns` on CPU for each tid (one process per tid)."""
    for tid, ns in threads.items():
        task = root / str(tid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "schedstat").write_text(f"{ns} 1000 7\n")


def test_utilisation_sums_each_layers_threads_over_the_wall_time():
    before = {10: 1_000_000_000, 11: 0, 12: 5}
    after = {10: 1_500_000_000, 11: 250_000_000, 12: 5, 13: 100_000_000}   # 13 born in between
    layer_of = {10: 0, 11: 1, 13: 1}                                       # 12 in no layer
    assert utilisation(before, after, layer_of, 0.5) == {0: 100.0, 1: 70.0}
    assert cpu_ns_by_tid(Path("/proc/self/..")) != {}    # the real /proc reads


def test_read_layers_measures_utilisation_itself_not_scx_layereds(tmp_path, monkeypatch):
    """scx_layered 1.1.4 answered 692.5% for one busy CPU in the lab (stale `now`, runtime/stats.py):
    the figure shown is the threads' own CPU time per layer over the interval's wall time."""
    import threadwise.runtime.stats as stats

    proc = tmp_path / "proc"
    fake_proc(proc, {10: 0, 11: 0})
    answered = {"layers": {"hot": {"index": 0, "tasks": 1, "util": 692.5, "cpus": [1], "is_excl": 1},
                           "rest": {"index": 1, "tasks": 1, "util": 40.0, "cpus": [2]}}}

    def busy_while_asked(tids: list[int]) -> dict[int, int]:
        assert tids == [10, 11]   # every thread read after the interval
        return {10: 0, 11: 1}   # tid -> layer index

    def stats_then_run(path, *, interval_s):   # the threads run during the interval
        result = read_sys_stats(path, interval_s=interval_s)
        fake_proc(proc, {10: int(interval_s * 1e9), 11: int(interval_s * 0.25e9)})
        return result

    readings = iter([100.0, 100.2])   # the wall clock at both reads: exactly the interval
    thread, _ = serve(tmp_path / "stats", [answered, answered])
    monkeypatch.setattr(stats, "read_sys_stats", stats_then_run)
    layers = read_layers(tmp_path / "stats", interval_s=0.2, proc=proc, layer_map=busy_while_asked,
                         clock=lambda: next(readings))
    thread.join(5)
    hot, rest = layers
    assert hot.util_source == rest.util_source == "threads"
    assert (hot.util_pct, rest.util_pct) == (100.0, 25.0)
    assert (hot.tasks, hot.cpus, hot.exclusive) == (1, [0], True)      # the rest stays scx_layered's


def test_without_the_layer_map_the_figure_is_scx_layereds_and_says_so(tmp_path):
    def no_map(_tids: list[int]) -> dict[int, int]:
        raise MembershipUnavailable("cannot read scx_layered's layer_match_dbg map: not attached")

    thread, _ = serve(tmp_path / "stats", [SYS_STATS, SYS_STATS])
    layers = read_layers(tmp_path / "stats", interval_s=0.01, proc=tmp_path, layer_map=no_map)
    thread.join(5)
    assert [(f.util_pct, f.util_source) for f in layers] == [(100.9, "scx_layered"), (13.4, "scx_layered")]
