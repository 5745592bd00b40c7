"""Per-layer figures from scx_layered's stats server (scx_stats, 1.1.4).

scx_layered listens on the UNIX socket `/var/run/scx/root/stats`. The protocol
is one JSON line each way: `{"req": "stats", "args": {"target": "top"}}` gets
`{"errno": 0, "args": {"resp": SysStats}}` where `SysStats.layers` maps layer
names to `LayerStats` (`tasks`, `util` in percent of one CPU, `cpus` as a
bitmask of u64 words, ...; see scx_layered `src/stats.rs`). Each connection
has its own baseline: the first answer covers the time since the scheduler's
last refresh, so `read_layers` asks twice, `interval_s` apart, and reports the
second.

Utilisation is ours, not scx_layered's. Its stats loop (1.1.4 main.rs `run`)
takes `now` at the top of each iteration, then blocks in `select!` for up to
one `--interval` (the preset is 5 s) until a request comes, and refreshes the
client's figures with that stale `now`: the elapsed time it divides by is the
gap between the previous request's handling and the loop's restart (about
nothing), while the usage counters cover the whole wait. Its `util` then reads
the layer's CPU-seconds over the interval times ln 2 / 0.1 s (its 100-ms usage
half-life): one busy CPU showed 692.5% on a one-CPU layer in the lab
(2026-11-26). So `read_layers` measures each layer's utilisation itself: the
on-CPU nanoseconds of every thread (`/proc/*/task/*/schedstat`, first field)
before and after the interval, summed per layer by where scx_layered has each
thread (`membership.read_placement`: its task state, or its debug match map
where the reader is not built), over the interval's wall time. Where neither
can be read, or the interval is 0, the figure is scx_layered's and the
`util_source` says so.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from threadwise.errors import MembershipUnavailable, MissingTool, StatsUnavailable
from threadwise.runtime.membership import PROC, read_placement

STATS_SOCKET = Path("/var/run/scx/root/stats")
THREADS = "threads"          # util_pct measured here from the threads' CPU time
SCX_LAYERED = "scx_layered"  # util_pct as scx_layered's stats answered it
REQUEST = b'{"req":"stats","args":{"target":"top"}}\n'


@dataclass(frozen=True)
class LayerFigures:
    name: str
    index: int
    tasks: int
    util_pct: float  # 100 = one CPU busy
    cpus: list[int]
    exclusive: bool
    util_source: str = SCX_LAYERED  # or THREADS

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


def cpu_ns_by_tid(proc: Path = PROC) -> dict[int, int]:
    """Every thread's time on a CPU so far, in ns (schedstat's first field); threads that end
    while being read are left out."""
    found: dict[int, int] = {}
    for path in proc.glob("[0-9]*/task/[0-9]*/schedstat"):
        try:
            found[int(path.parent.name)] = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return found


def utilisation(before: dict[int, int], after: dict[int, int], layer_of: dict[int, int],
                seconds: float) -> dict[int, float]:
    """{layer index: percent of one CPU} from two readings of the threads' CPU time; a thread
    born in between counts from 0, a thread in no layer counts nowhere."""
    used: dict[int, int] = {}
    for tid, ns in after.items():
        layer = layer_of.get(tid)
        if layer is not None:
            used[layer] = used.get(layer, 0) + max(0, ns - before.get(tid, 0))
    return {layer: ns / 1e9 / seconds * 100.0 for layer, ns in used.items()}


def read_layers(path: Path = STATS_SOCKET, *, interval_s: float = 1.0, proc: Path = PROC,
                layer_map: Callable[[list[int]], dict[int, int]] = read_placement,
                clock: Callable[[], float] = time.monotonic) -> list[LayerFigures]:
    """Per-layer figures over `interval_s`: tasks and CPUs from scx_layered, utilisation measured
    from the threads' CPU time (see the module note); `layer_map(tids)` says where each is."""
    if interval_s <= 0:
        return layers_from_stats(read_sys_stats(path, interval_s=interval_s))
    before, started = cpu_ns_by_tid(proc), clock()
    figures = layers_from_stats(read_sys_stats(path, interval_s=interval_s))
    after, seconds = cpu_ns_by_tid(proc), clock() - started
    try:
        layer_of = layer_map(sorted(after))
    except (MembershipUnavailable, MissingTool):
        return figures
    measured = utilisation(before, after, layer_of, seconds)
    return [replace(figure, util_pct=round(measured.get(figure.index, 0.0), 1), util_source=THREADS)
            for figure in figures]
