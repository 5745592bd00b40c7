"""Per-layer figures from scx_layered's stats server (scx_stats, 1.1.4).

scx_layered listens on the UNIX socket `/var/run/scx/root/stats`. The protocol
is one JSON line each way: `{"req": "stats", "args": {"target": "top"}}` gets
`{"errno": 0, "args": {"resp": SysStats}}` where `SysStats.layers` maps layer
names to `LayerStats` (`tasks`, `util` in percent of one CPU, `cpus` as a
bitmask of u64 words, ...; see scx_layered `src/stats.rs`). Each connection
has its own baseline: the first answer covers the time since the scheduler's
last refresh, so `read_layers` asks twice, `interval_s` apart, and reports the
second (utilisation over that interval).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from threadwise.errors import StatsUnavailable

STATS_SOCKET = Path("/var/run/scx/root/stats")
REQUEST = b'{"req":"stats","args":{"target":"top"}}\n'


@dataclass(frozen=True)
class LayerFigures:
    name: str
    index: int
    tasks: int
    util_pct: float  # 100 = one CPU busy
    cpus: list[int]
    exclusive: bool

    def to_json(self) -> dict:
        return asdict(self)


def cpus_from_mask(words: list[int]) -> list[int]:
    """[0b101, 0b1] -> [0, 2, 64]."""
    return [
        word_index * 64 + bit for word_index, word in enumerate(words) for bit in range(64) if word >> bit & 1
    ]


def layers_from_stats(sys_stats: dict) -> list[LayerFigures]:
    figures = [
        LayerFigures(
            name=name,
            index=int(layer.get("index", 0)),
            tasks=int(layer.get("tasks", 0)),
            util_pct=float(layer.get("util", 0.0)),
            cpus=cpus_from_mask([int(w) for w in layer.get("cpus", [])]),
            exclusive=bool(layer.get("is_excl", 0)),
        )
        for name, layer in sys_stats.get("layers", {}).items()
    ]
    return sorted(figures, key=lambda figure: figure.index)


def _ask(conn: socket.socket) -> dict:
    conn.sendall(REQUEST)
    buffer = b""
    while not buffer.endswith(b"\n"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise StatsUnavailable("scx_layered closed the stats connection")
        buffer += chunk
    answer = json.loads(buffer)
    if answer.get("errno"):
        raise StatsUnavailable(f"scx_layered stats error {answer['errno']}: {answer.get('args')}")
    return answer["args"]["resp"]


def read_sys_stats(path: Path = STATS_SOCKET, *, interval_s: float = 1.0, timeout_s: float = 10.0) -> dict:
    """SysStats as a dict, covering the last `interval_s` seconds."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(path))
            stats = _ask(conn)
            if interval_s > 0:
                time.sleep(interval_s)
                stats = _ask(conn)
            return stats
    except (OSError, ValueError, KeyError) as error:
        raise StatsUnavailable(
            f"cannot read scx_layered stats from {path}: {error}",
            hint="is scx_layered attached? see `threadwise status`",
        ) from error


def read_layers(path: Path = STATS_SOCKET, *, interval_s: float = 1.0) -> list[LayerFigures]:
    return layers_from_stats(read_sys_stats(path, interval_s=interval_s))
