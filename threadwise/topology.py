"""CPU topology from sysfs: cores, packages, SMT siblings, last-level caches.

The machine is every stage's concern: observe records it with each capture
(the `cpu_topology` table), synthesize compiles for its shape (shape.py), and
the runtime and refine place layers on it. So it lives in the core package,
below every stage, and no stage reaches into another for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuInfo:
    """One logical CPU: a row of the capture's `cpu_topology` table (schema_v1.sql)."""

    cpu: int
    core_id: int
    package_id: int
    core_key: int
    smt_siblings: tuple[int, ...]
    llc_id: int
    llc_cpus: tuple[int, ...]
    online: bool


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return tuple(cpus)


def _read_int(path: Path, default: int = 0) -> int:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return default


def _llc(cpu_dir: Path, cpu: int) -> tuple[int, tuple[int, ...]]:
    """The highest-level cache of a CPU: its id and the CPUs that share it."""
    best: tuple[int, int, tuple[int, ...]] = (-1, cpu, (cpu,))
    for index in sorted((cpu_dir / "cache").glob("index*")):
        level = _read_int(index / "level", -1)
        shared = index / "shared_cpu_list"
        if level > best[0] and shared.exists():
            cpus = parse_cpu_list(shared.read_text())
            cache_id = _read_int(index / "id", min(cpus))
            best = (level, cache_id, cpus)
    return best[1], best[2]


def read_topology(root: Path = SYS_CPU) -> list[CpuInfo]:
    possible = parse_cpu_list((root / "possible").read_text()) if (root / "possible").exists() else ()
    online = set(parse_cpu_list((root / "online").read_text())) if (root / "online").exists() else set()
    infos: list[CpuInfo] = []
    core_keys: dict[tuple[int, int], int] = {}
    for cpu in possible:
        cpu_dir = root / f"cpu{cpu}"
        topo = cpu_dir / "topology"
        core_id = _read_int(topo / "core_id", cpu)
        package_id = _read_int(topo / "physical_package_id", 0)
        siblings_file = topo / "thread_siblings_list"
        siblings = parse_cpu_list(siblings_file.read_text()) if siblings_file.exists() else (cpu,)
        key = core_keys.setdefault((package_id, core_id), len(core_keys))
        llc_id, llc_cpus = _llc(cpu_dir, cpu)
        infos.append(CpuInfo(cpu, core_id, package_id, key, siblings, llc_id, llc_cpus, cpu in online))
    return infos


def synthetic_topology(nr_cpus: int, threads_per_core: int = 1) -> list[CpuInfo]:
    """A machine of identical cores, CPUs numbered core by core (core c holds CPUs
    c*T .. c*T+T-1, as shape.synthetic's shapes), one package, one LLC."""
    if nr_cpus < 1 or threads_per_core < 1 or nr_cpus % threads_per_core:
        raise ValueError(f"{nr_cpus} CPUs do not make cores of {threads_per_core} threads")
    everyone = tuple(range(nr_cpus))
    tpc = threads_per_core
    return [CpuInfo(cpu, cpu // tpc, 0, cpu // tpc, tuple(range(cpu - cpu % tpc, cpu - cpu % tpc + tpc)),
                    0, everyone, True)
            for cpu in everyone]
