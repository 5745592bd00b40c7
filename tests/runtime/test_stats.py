"""scx_layered stats: the socket protocol and the per-layer figures (fast tier)."""

from __future__ import annotations

import json
import socket
import threading

from threadwise.runtime.stats import cpus_from_mask, layers_from_stats, read_layers

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
    layers = read_layers(tmp_path / "stats", interval_s=0.01)
    thread.join(5)
    assert requests == [{"req": "stats", "args": {"target": "top"}}] * 2
    assert layers[0].util_pct == 100.9
