"""Machine shapes: physical cores, their SMT siblings, and the cores kept for the system.

A shape comes from `host` (sysfs), an explicit `cores=N,threads-per-core=T`
(optionally `,reserve=R`), or a JSON/TOML file with the same keys (or an
explicit `siblings` list). Synthetic shapes number CPUs core by core: core c
holds CPUs c*T .. c*T+T-1 (topology.synthetic_topology: one numbering for
synthetic captures and synthetic shapes). The host's shape is read through
topology.py, the same reader a capture records with. Shapes live in the core
package because every stage meets them: import takes one for a trace that
names no topology, synthesize compiles for one, runtime and refine apply and
measure on one.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from threadwise.errors import UsageError
from threadwise.paths import require_text
from threadwise.topology import SYS_CPU, read_topology, synthetic_topology

DEFAULT_RESERVE_CORES = 1
SYSFS_CPU = SYS_CPU


@dataclass(frozen=True)
class Shape:
    """Physical cores as tuples of sibling CPU ids; `reserve_cores` stay with the system."""

    siblings: tuple[tuple[int, ...], ...]
    reserve_cores: int = DEFAULT_RESERVE_CORES
    source: str = "explicit"

    @property
    def cores(self) -> int:
        return len(self.siblings)

    @property
    def threads_per_core(self) -> int:
        return max((len(core) for core in self.siblings), default=1)

    @property
    def nr_cpus(self) -> int:
        return sum(len(core) for core in self.siblings)

    @property
    def exclusive_budget(self) -> int:
        """Cores that exclusive groups may take: all cores minus the reserve."""
        return max(self.cores - self.reserve_cores, 0)

    @property
    def spec(self) -> str:
        """The shape as `--shape` takes it, for a command line shown or a record stored: `host` for
        this machine's, `cores=N,threads-per-core=T` (`,reserve=R` unless the default) for one
        numbered core by core, else where it came from (its file)."""
        if self.source == "host" and self.reserve_cores == DEFAULT_RESERVE_CORES:
            return "host"
        if self.siblings == synthetic(self.cores, self.threads_per_core, self.reserve_cores).siblings:
            reserve = "" if self.reserve_cores == DEFAULT_RESERVE_CORES else f",reserve={self.reserve_cores}"
            return f"cores={self.cores},threads-per-core={self.threads_per_core}{reserve}"
        return self.source

    def describe(self) -> str:
        return (f"{self.cores} cores x {self.threads_per_core} threads ({self.nr_cpus} CPUs), "
                f"{self.reserve_cores} reserved for the system")

    def as_dict(self) -> dict[str, object]:
        return {"cores": self.cores, "threads_per_core": self.threads_per_core,
                "reserve_cores": self.reserve_cores, "source": self.source,
                "siblings": [list(core) for core in self.siblings]}


def synthetic(cores: int, threads_per_core: int = 1,
              reserve_cores: int = DEFAULT_RESERVE_CORES) -> Shape:
    """A shape of `cores` identical cores."""
    if cores < 1 or threads_per_core < 1 or reserve_cores < 0:
        raise UsageError(
            f"bad shape: cores={cores}, threads-per-core={threads_per_core}, "
            f"reserve={reserve_cores}",
            hint="cores and threads-per-core are >= 1, reserve >= 0",
        )
    cpus = synthetic_topology(cores * threads_per_core, threads_per_core)
    siblings = tuple(sorted({cpu.smt_siblings for cpu in cpus}))
    return Shape(siblings, reserve_cores, source=f"cores={cores},threads-per-core="
                 f"{threads_per_core},reserve={reserve_cores}")


class _ShapeFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    cores: Annotated[int, Field(ge=1)] | None = None
    threads_per_core: Annotated[int, Field(ge=1)] = 1
    reserve_cores: Annotated[int, Field(ge=0)] = DEFAULT_RESERVE_CORES
    siblings: list[list[int]] | None = None


def parse_shape(spec: str) -> Shape:
    """`host`, `cores=N,threads-per-core=T[,reserve=R]`, or a JSON/TOML file."""
    if spec == "host":
        return host_shape()
    if "=" in spec:
        return _parse_pairs(spec)
    path = Path(spec)
    if path.is_file():
        return _shape_file(path)
    if path.is_dir() or "/" in spec or path.suffix in (".json", ".toml"):
        what = "is a directory" if path.is_dir() else "file not found"
        raise UsageError(f"shape file {spec!r}: {what}",
                         hint="give an existing JSON/TOML shape file, `host`, or "
                              "cores=N,threads-per-core=T[,reserve=R]")
    raise UsageError(
        f"unknown shape {spec!r}",
        hint="use `host`, `cores=N,threads-per-core=T[,reserve=R]`, or a JSON/TOML file",
    )


def _parse_pairs(spec: str) -> Shape:
    names = {"cores": "cores", "threads-per-core": "threads_per_core", "tpc": "threads_per_core",
             "reserve": "reserve_cores"}
    values: dict[str, int] = {}
    for pair in spec.split(","):
        key, _, value = pair.partition("=")
        key = key.strip()
        if key not in names or not value.strip().isdigit():
            raise UsageError(
                f"bad shape item {pair!r} in {spec!r}",
                hint="keys: cores=N, threads-per-core=T (or tpc=T), reserve=R (non-negative integers)",
            )
        values[names[key]] = int(value)
    if "cores" not in values:
        raise UsageError(f"shape {spec!r} has no cores=N", hint="e.g. cores=4,threads-per-core=2")
    return synthetic(values["cores"], values.get("threads_per_core", 1),
                     values.get("reserve_cores", DEFAULT_RESERVE_CORES))


def _shape_file(path: Path) -> Shape:
    require_text(path, "a shape file (JSON or TOML)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as bad:
        raise UsageError(f"{path}: not a shape file (not UTF-8 text: {bad.reason})") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        spec = _ShapeFile.model_validate(raw)
    except (ValueError, ValidationError) as bad:
        raise UsageError(f"{path}: not a shape file ({str(bad).splitlines()[0]})",
                         hint="keys: cores, threads_per_core, reserve_cores, siblings") from None
    if spec.siblings:
        return Shape(tuple(tuple(core) for core in spec.siblings), spec.reserve_cores, str(path))
    if spec.cores is None:
        raise UsageError(f"{path}: a shape needs cores or siblings")
    shape = synthetic(spec.cores, spec.threads_per_core, spec.reserve_cores)
    return Shape(shape.siblings, shape.reserve_cores, str(path))


def host_shape(root: Path = SYSFS_CPU, reserve_cores: int = DEFAULT_RESERVE_CORES) -> Shape:
    """The shape of this machine: the sysfs topology's online CPUs, grouped into cores."""
    try:
        cpus = [cpu for cpu in read_topology(root) if cpu.online]
        online = {cpu.cpu for cpu in cpus}
        cores = {tuple(sorted(c for c in cpu.smt_siblings if c in online)) for cpu in cpus}
        if not cores:
            raise OSError(f"no online CPU under {root}")
    except OSError as bad:
        raise UsageError(f"cannot read the CPU topology from {root}: {bad}",
                         hint="give the shape explicitly: cores=N,threads-per-core=T") from None
    return Shape(tuple(sorted(cores)), reserve_cores, source="host")
