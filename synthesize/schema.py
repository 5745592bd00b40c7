"""The profile schema: what a reviewed profile TOML may contain (pydantic, strict).

A profile is machine-independent: it names the workload, and lists thread
groups with their comm patterns, treatment, sizing and the evidence behind
them. The machine shape only enters in `compile`. Units are in field names
(`_us`, `_millicores`, `_per_s`). Every model forbids unknown keys and
non-finite floats; the TOML reader maps pydantic's errors back to lines.

Field-level checks live here (types, ranges, empty lists); rules that need the
whole profile or scx_layered's limits (prefix length, suffix patterns,
overlaps, layer counts) live in `rules.py`, so that each one can report its
own rule name and hint.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from threadwise.analyze.contract import Role  # the role names are analyze's (declared once)
from threadwise.errors import UsageError

__all__ = ["OPTION_KEYS", "SCHEMA_VERSION", "CatchAll", "Evidence", "Group", "Profile", "Role", "Scheduler",
           "Source", "Treatment", "Workload"]

SCHEMA_VERSION = 1
# The keys of a group (and of [catch_all]) that override a preset's scx_layered option; each is
# named exactly as the option in scx_layered 1.1.4's config.rs (LayerCommon, or LayerKind for
# `protected`), in schema order (presets.py lays them over the treatment's preset).
OPTION_KEYS = ("slice_us", "weight", "preempt", "preempt_first", "exclusive", "protected", "min_exec_us",
               "disallow_preempt_after_us")
# scx_layered turns microseconds into u64 nanoseconds (`x * 1000`): larger values would wrap.
MAX_US = (2**64 - 1) // 1000
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
NAME_RULE = ("1 to 64 characters: letters, digits, '_', '.' and '-', starting with a letter or digit "
             "(no spaces or '/')")


def check_name(name: str, option: str = "--name") -> str:
    """`name` if it is a valid profile or group name, else a UsageError that states the rule in words."""
    if re.fullmatch(NAME_PATTERN, name) is None:
        raise UsageError(f"bad {option} {name!r}: a name is {NAME_RULE}",
                         hint=f"e.g. {option} {_suggest_name(name)}")
    return name


def _suggest_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-._")[:64]
    return cleaned or "my-service"


class Treatment(StrEnum):
    """How a group's threads are scheduled (see `compile.py` for the layer each becomes)."""

    EXCLUSIVE = "exclusive"  # whole physical cores of their own (Confined, exclusive)
    LATENCY = "latency"  # preempt, short slices (wake chains)
    BATCH = "batch"  # low weight, long slices
    HOUSEKEEPING = "housekeeping"  # lowest weight
    DEFAULT = "default"  # an ordinary layer; kept so that first-match order holds


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, populate_by_name=True
    )


NonNegInt = Annotated[int, Field(ge=0)]
Micros = Annotated[int, Field(ge=0, le=MAX_US)]
SliceUs = Annotated[int, Field(ge=1)]
Weight = Annotated[int, Field(ge=1, le=10000)]
NonNegFloat = Annotated[float, Field(ge=0.0)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Uid = Annotated[int, Field(ge=0, le=2**32 - 1)]   # scx_layered's UIDEquals takes a u32


class Workload(_Model):
    """How the workload's threads are recognised: its process comm (scx_layered
    `PcommPrefix`), its cgroup (`CgroupPrefix`: a pod's or a service's cgroup v2 path), or
    both (every layer's match blocks then require both)."""

    process: Annotated[str, Field(min_length=1)] | None = None
    cgroup: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _named(self) -> Workload:
        if self.process is None and self.cgroup is None:
            raise ValueError("name the workload: process = \"comm\", cgroup = \"/path\", or both")
        return self


class Source(_Model):
    """The capture a generated profile was trained on (evidence only; not compiled)."""

    capture: str | None = None       # path relative to the profile's directory
    capture_sha256: str | None = None  # content hash of the capture file
    duration_s: NonNegFloat | None = None
    nr_cpus: Annotated[int, Field(ge=1)] | None = None
    events_lost: NonNegInt | None = None
    caveats: list[str] = []


class Evidence(_Model):
    """What the capture showed about a group; rendered as comments above it."""

    role: Annotated[Role, Field(strict=False)] | None = None
    confidence: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    threads: NonNegInt = 0
    names: list[str] = []
    cpu_share: NonNegFloat = 0.0
    max_thread_share: NonNegFloat = 0.0
    wakeups_per_s: NonNegFloat = 0.0
    slice_p50_us: NonNegFloat | None = None
    slice_p99_us: NonNegFloat | None = None
    rq_latency_p50_us: NonNegFloat | None = None
    rq_latency_p99_us: NonNegFloat | None = None
    in_wake_chain: bool = False
    separable: bool = True
    process_titles: list[str] = []   # its processes' titles, when one comm's processes differ in title


class Group(_Model):
    """One set of threads with one treatment; becomes one scx_layered layer."""

    name: Name
    # Or selected by process title (`postgres: checkpointer`): processes whose title equals a
    # pattern or continues it after a space; compiled to a HintEquals layer ahead of the rest,
    # whose hint the runtime writes after reading each process's title (analyze/titles.py).
    # (Declared before `match`, so that match's check sees it.)
    title: list[str] = []
    match: list[str] = []
    exclude: list[str] = []
    avg_runtime_us: list[NonNegInt] | None = None
    # Only threads running as this effective uid (scx_layered UIDEquals): the role of a forked
    # process that shares its comm with others and runs as its own user (analyze/titles.py).
    uid: Uid | None = None
    treatment: Annotated[Treatment, Field(strict=False)]
    family: str | None = None     # the known runtime family of its threads (families.py)
    hot_threads: NonNegInt = 0
    cpu_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    request_millicores: Annotated[int, Field(ge=1)] | None = None
    # Overrides of the treatment's preset (presets.py; None: the preset's value), named as the
    # scx_layered option they set; rules.py rejects combinations scx_layered would ignore.
    slice_us: SliceUs | None = None
    weight: Weight | None = None
    preempt: bool | None = None
    preempt_first: bool | None = None
    exclusive: bool | None = None
    protected: bool | None = None
    min_exec_us: Micros | None = None
    disallow_preempt_after_us: Micros | None = None
    comment: str | None = None
    evidence: Evidence | None = None

    @field_validator("match")
    @classmethod
    def _not_empty(cls, patterns: list[str], info: ValidationInfo) -> list[str]:
        if not patterns and not info.data.get("title"):
            raise ValueError("a group needs at least one match pattern")
        if any(not p for p in patterns):
            raise ValueError("an empty pattern would match every thread; name a comm prefix")
        return patterns

    @model_validator(mode="after")
    def _selected(self) -> Group:
        if not self.match and not self.title:
            raise ValueError("a group needs at least one match pattern (or title pattern)")
        if self.title:
            mixed = [k for k in ("match", "exclude", "uid", "avg_runtime_us") if getattr(self, k)
                     not in ([], None)]
            if mixed:
                raise ValueError(f"a group selected by title takes no {', '.join(mixed)}: scx_layered's "
                                 "HintEquals may not share an AND block with other matchers")
        return self

    @field_validator("avg_runtime_us")
    @classmethod
    def _range(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (len(value) not in (1, 2) or (len(value) == 2 and value[0] >= value[1])):
            raise ValueError("avg_runtime_us is [min, max) with min < max, or [min] for min and above")
        return value

    def avg_runtime_bounds(self) -> tuple[int, int | None] | None:
        """(min, max) of the AvgRuntime split in us, max None when open-ended; None: no split."""
        if self.avg_runtime_us is None:
            return None
        low, *high = self.avg_runtime_us
        return low, (high[0] if high else None)

    def exclusive_cores(self) -> int:
        """Whole cores this group asks for: ceil(demand x cpu_fraction), demand in CPUs.

        Demand is the pod's CPU request when given, else one CPU per hot thread.
        """
        demand_m = self.request_millicores if self.request_millicores else self.hot_threads * 1000
        wanted_m = round(demand_m * self.cpu_fraction, 6)
        return math.ceil(wanted_m / 1000 - 1e-9) if wanted_m > 0 else 0

    def fraction_for_cores(self, cores: int) -> float | None:
        """A cpu_fraction in (0, 1] sizing this group at exactly `cores` exclusive cores (the
        shortest such number), or None when no fraction of its demand does."""
        demand_m = self.request_millicores or self.hot_threads * 1000
        if cores < 1 or demand_m <= 0:
            return None
        exact = cores * 1000 / demand_m
        for value in (round(exact, 2), round(exact, 4), exact):
            if 0 < value <= 1 and self.model_copy(update={"cpu_fraction": value}).exclusive_cores() == cores:
                return value
        return None


class CatchAll(_Model):
    """Overrides of the catch-all layer `rest` (every thread no group takes, on the whole machine):
    an Open layer whose preset is presets.CATCH_ALL_OPTIONS. None: the preset's value."""

    slice_us: SliceUs | None = None
    weight: Weight | None = None
    preempt: bool | None = None


# scx_layered's userspace step (`--interval`, 0.1 s by default): how often it re-sizes layers and
# reads its statistics. Below 10 ms it would be the busiest thread on the machine; above 10 s a
# Grouped/Confined layer with a util range would not follow its load at all.
IntervalMs = Annotated[int, Field(ge=10, le=10_000)]


class Scheduler(_Model):
    """Options of the scx_layered process itself (command-line flags, not layer options).

    interval_ms: scx_layered's `--interval` in ms (None: the preset, presets.SCHEDULER_INTERVAL_MS).
    Its userspace step runs ahead of every layer (main.bpf.c special-cases the scheduler's own
    task), so each step holds a CPU a waking latency thread may want: see docs/profile-schema.md.
    """

    interval_ms: IntervalMs | None = None


class Profile(_Model):
    """A workload profile: the root of a profile TOML."""

    schema_version: Literal[1]
    name: Name
    comment: str | None = None
    workload: Workload
    source: Source | None = None
    groups: list[Group] = Field(alias="group")
    catch_all: CatchAll | None = None
    scheduler: Scheduler | None = None

    @field_validator("groups")
    @classmethod
    def _has_groups(cls, groups: list[Group]) -> list[Group]:
        if not groups:
            raise ValueError("a profile needs at least one [[group]]")
        return groups
