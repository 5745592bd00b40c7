"""The Analysis contract (docs/interfaces.md): role names, hot threads, one typed group row.

Problem: synthesize builds profiles from analyze's groups, lint judges a
capture's threads, refine mutates what both decided. Each needs the same role
names, the same idea of a "hot" thread and the same row shape; written down
twice they drift (lint once counted a thread starved by other load as cold
while analyze counted it hot, so `lint --capture` disagreed with `synthesize`).

Approach: declare them once, here, in a module light enough (no polars,
numpy or scikit-learn) for `threadwise validate` to import:
- `Role`, the five roles, in the clusterer's prototype order;
- `is_hot(cpu_share, demand)`, written with operators only, so the same
  expression works on floats (lint), numpy arrays and polars columns
  (analyze's group aggregation);
- `is_poller(cpu_share, cpu_ns, wakeups)`, a busy-poller (below), likewise;
- `GroupRow`, one row of `Analysis.groups` (the contract columns, in contract
  order, typed), and `AnalysisRecord`, the contract part of an `Analysis` as
  plain typed data (what synthesize reads and the golden fixtures hold).
  `model.py` derives the polars schema of `Analysis.groups` from `GroupRow`,
  and from `AnalysisRecord` (its fields but `groups`: `RECORD_FIELDS`) the
  stored `analysis_meta` table and the scalars of `Analysis.to_dict`.

Busy-pollers (issue 23). A thread that stays busy with few wakeups spins
between them (Redis 7's io threads spin up to 1M iterations on a pending
counter before they look at the mutex the main thread parks them with). The
latency treatment, preempt with 1 ms slices, makes such a thread a spinner no
one can preempt (scx_layered never preempts a CPU running a preempting task),
so synthesize never gives a poller preempt on shared CPUs. A thread is a
poller when it keeps at least POLLER_SHARE of a CPU busy AND spends at least
POLLER_CPU_PER_WAKEUP_NS of CPU per wakeup it receives (never woken: every
busy thread is one). Measured per thread, CPU per wakeup at CPU share (bpf-tier
captures on this 2-CPU host, libbpf and bpftrace, unless said; the full table
is in docs/analyze.md, "Busy-pollers"):
- Redis io_thd_1, a poller in every capture: 0.46 ms at 0.51 CPU, 0.75 ms at
  0.46, 0.76 ms at 0.39, 0.82 ms at 0.197 (the golden redis-capture), 29 ms
  at 0.45 (15 wakeups/s, the host loaded by a lab run), 43 ms at 0.71 (16.5
  wakeups/s, the lab's TCG training capture). It sleeps only after a whole
  pass of its spin finds no work, so every wakeup costs at least one pass:
  1M iterations of that loop take 0.23 ms of CPU here (measured);
- wake-driven threads: redis-server 0.072-0.108 ms at 0.18-0.47 CPU, rolesim
  workers 0.074-0.105 ms and feeder 0.029-0.077 ms (<= 0.017 CPU), the JVM
  pool's writer and acceptor 0.002-0.016 ms; rolesim housekeep runs 0.21 ms
  per wakeup at 0.002 CPU, which the share floor keeps out (bio_aof_fsync:
  0.046-0.069 ms at <= 0.0006);
- busy threads that rarely sleep: rolesim hot-* (0.19-1.0 CPU, never woken)
  and the JVM pool's request-* (0.21-0.41 CPU, 21-169 ms per wakeup): pollers
  by the rule, compute by role, and they keep their treatment (synthesize).
0.2 ms sits 1.85x above the busiest wake-driven run (0.108 ms) and 2.3x below
the io thread's least mean (0.46 ms, two passes of its spin), so a CPU up to
~2x faster or slower than this one keeps both sides apart. When the main
thread has to wait for CPU, it waits for its io threads longer and wakes
less: it busy-waits for them (networking.c, "Wait for all the other threads
to end their work") and then counts as a poller too: 4.5 ms per wakeup at
0.40 CPU, 90 wakeups/s, runnable 93% of its life, on this host loaded by a
lab run, and 0.94 ms at 0.51 CPU under TCG (the lab, ~9x slower). 0.1 CPU is
a fifth of HOT_SHARE: below it a thread holds a CPU a tenth of the time at
most, whatever its treatment (the io thread's least share seen is 0.197,
twice the floor; rolesim's busiest wake-driven thread is at 0.017).
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol, TypeVar


class Role(StrEnum):
    """The role analysis infers for a group (the contract's `role` column)."""

    COMPUTE = "compute"            # hot, long slices, always runnable
    LATENCY = "latency"            # in a wake chain or woken by requests, short slices, frequent wakeups
    HOUSEKEEPING = "housekeeping"  # low duty, periodic
    BATCH = "batch"                # long bursts nobody waits on
    DEFAULT = "default"            # too little activity to say


ROLES: tuple[str, ...] = tuple(role.value for role in Role)

HOT_SHARE = 0.5      # a "hot" thread uses at least half a CPU...
WANTS_CPU = 0.9      # ...or is running/runnable this much of its life (CPU taken by other load)
STOLEN_SHARE = 0.25  # while still getting at least this much
NEAR_HOT = 0.2       # a busiest thread within 20% of HOT_SHARE could be read either way
MIN_LIFE_NS = 100_000_000   # threads of a pattern that all lived less than this form no group
POLLER_SHARE = 0.1          # a poller keeps at least this much of a CPU busy...
POLLER_CPU_PER_WAKEUP_NS = 200_000   # ...and runs at least this long per wakeup it receives (module note)

_Value = TypeVar("_Value")


def near_hot(max_thread_share: float) -> float | None:
    """How far (0 at the cutoff, 1 at the edge of the band) a busiest thread sits from
    HOT_SHARE, when within NEAR_HOT of it; None when it is clearly on one side."""
    band = NEAR_HOT * HOT_SHARE
    distance = abs(max_thread_share - HOT_SHARE)
    return distance / band if distance <= band else None


def is_hot(cpu_share: _Value, demand: _Value) -> _Value:
    """Whether a thread is hot: `cpu_share` in CPUs over its life, `demand` its running or
    runnable share of its life (thread_features.sql). Operators only, so floats give a bool
    and polars expressions or numpy arrays give a column; fill nulls before calling.
    """
    return (cpu_share >= HOT_SHARE) | ((demand >= WANTS_CPU) & (cpu_share >= STOLEN_SHARE))  # type: ignore[operator]


def is_poller(cpu_share: _Value, cpu_ns: _Value, wakeups: _Value) -> _Value:
    """Whether a thread is a busy-poller: `cpu_share` in CPUs over its life, `cpu_ns` its CPU
    time and `wakeups` the wakeups it received in the same window (thread_features.sql).
    Operators only (no division: a thread never woken is a poller when it is busy), so floats
    give a bool and polars expressions or numpy arrays give a column; fill nulls first.
    """
    return (cpu_share >= POLLER_SHARE) & (cpu_ns >= wakeups * POLLER_CPU_PER_WAKEUP_NS)  # type: ignore[operator]


def poller_text(name: str, cpu_share: float, wakeups_per_s: float) -> str:
    """A poller's evidence in words: `io_thd_1 0.71 CPU at 16.6 wakeups/s (43 ms of CPU per wakeup)`."""
    if wakeups_per_s > 0:
        per_wakeup = cpu_share / wakeups_per_s * 1e3
        run = f"{per_wakeup:.2g} ms" if per_wakeup < 10 else f"{per_wakeup:.0f} ms"
        return f"{name} {cpu_share:.2f} CPU at {wakeups_per_s:.3g} wakeups/s ({run} of CPU per wakeup)"
    return f"{name} {cpu_share:.2f} CPU at 0 wakeups/s (never woken)"


@dataclass(frozen=True, kw_only=True)
class GroupRow:
    """One row of `Analysis.groups`: the contract columns, in order (docs/interfaces.md)."""

    pattern: str                         # normalised name pattern, e.g. hot-*
    role: Role
    confidence: float                    # 0..1
    match_prefixes: list[str]            # comm prefixes (<= 15 bytes) that select the group (OR)
    exclude_prefixes: list[str] = field(default_factory=list)
    separable: bool = True               # false when no prefix set separates it from another group
    thread_count: int
    names: list[str]                     # the observed comms
    cpu_time_ns: int
    cpu_share: float                     # CPU time / duration, in CPUs
    max_thread_share: float
    hot_threads: int                     # threads for which is_hot() holds
    slice_p50_ns: int | None = None
    slice_p99_ns: int | None = None
    wakeups_per_s: float
    rq_latency_p50_ns: int | None = None
    rq_latency_p99_ns: int | None = None
    in_wake_chain: bool = False
    avg_runtime_range_ns: list[int] | None = None   # [low, high) ns: an AvgRuntime behaviour split
    thin_evidence: str | None = None     # what the role rests on little of (confidence lowered), if any
    poller_threads: int = 0              # threads for which is_poller() holds (busy, few wakeups)
    poller_evidence: str | None = None   # the busiest poller in words (poller_text), if any
    process_titles: list[str] = field(default_factory=list)   # its processes' titles (titles.py), when
    #                                      they differ within its comm; empty when titles played no part
    uid: int | None = None               # effective uid its processes run as: scx_layered UIDEquals, set
    #                                      when a title split separated it from a group of another uid
    title_patterns: list[str] = field(default_factory=list)   # process-title patterns that select it
    #                                      (`postgres: checkpointer`): a hinted layer, set when a title
    #                                      split found roles no comm or uid tells apart (titles.py)
    request_evidence: str | None = None  # its most request-driven thread in words (requests.py): woken
    #                                      from outside the workload, irregularly, for short runs
    fleet_evidence: str | None = None    # across a fleet's hosts (fleet.py): host counts, the share it is
    #                                      sized at and each host's, roles that differ, outliers

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))   # unknown role names fail here

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> GroupRow:
        """A row of the groups DataFrame (evidence columns after the contract ones are ignored)."""
        return cls(**{name: row[name] for name in COLUMNS if name in row})


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(GroupRow))


class _AnalysisLike(Protocol):
    """What `AnalysisRecord.of` reads: an `Analysis`, its groups a polars DataFrame and every
    other field of the record an attribute of the same name (RECORD_FIELDS)."""

    @property
    def groups(self) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class AnalysisRecord:
    """The contract part of an `Analysis` as plain typed data.

    Declared here only: `Analysis` carries the same fields (a test holds it to that), and the
    stored `analysis_meta` table (model.META_SCHEMA), `Analysis.to_dict` and `of` below all
    follow `RECORD_FIELDS`, so a field added here reaches them and the docs check.
    """

    process_name: str
    duration_ns: int
    nr_cpus: int
    groups: list[GroupRow]
    events_lost: int = 0
    caveats: list[str] = field(default_factory=list)
    cgroup: str | None = None      # the cgroup observe targeted (`observe --cgroup`), if any
    cgroup_cpu_quota_us: int | None = None    # its CPU limit: quota per period (us)...
    cgroup_cpu_period_us: int | None = None   # ...quota None with a period: no limit; both None: unread
    short_lived: list[str] = field(default_factory=list)   # threads too short-lived to form a group
    names_separate_roles: bool = True   # false: a group's threads all carry the process's name

    @classmethod
    def of(cls, analysis: _AnalysisLike) -> AnalysisRecord:
        """The record of an `Analysis` (groups read from its DataFrame by column name; a field
        it lacks, or holds as None where the record takes no None, gets the record's default)."""
        values: dict[str, Any] = {}
        for name, hint in _RECORD_HINTS.items():
            value = getattr(analysis, name, None)
            if value is None and type(None) not in typing.get_args(hint):
                continue   # e.g. events_lost unknown: the default, 0
            if hint is int:
                value = int(value)   # numpy or duckdb integers become plain ones
            elif isinstance(value, list | tuple):
                value = list(value)
            values[name] = value
        return cls(groups=[GroupRow.from_row(row) for row in analysis.groups.to_dicts()], **values)

    def cgroup_cpu_millicores(self) -> int | None:
        """The cgroup's CPU limit in millicores (None: no limit, or not read)."""
        if self.cgroup_cpu_quota_us is None or not self.cgroup_cpu_period_us:
            return None
        return -(-self.cgroup_cpu_quota_us * 1000 // self.cgroup_cpu_period_us)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (what the golden fixtures hold)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> AnalysisRecord:
        """Inverse of `to_dict`; keys starting with `_` (notes) are ignored."""
        data = {k: v for k, v in raw.items() if not k.startswith("_")}
        data["groups"] = [GroupRow(**row) for row in data["groups"]]
        return cls(**data)


# The record's fields but `groups` (a table of its own), in order: the scalar contract of an
# analysis, which `analysis_meta` stores one column each and `Analysis.to_dict` writes.
_RECORD_HINTS: dict[str, Any] = {name: hint for name, hint in typing.get_type_hints(AnalysisRecord).items()
                                 if name != "groups"}
RECORD_FIELDS: tuple[str, ...] = tuple(_RECORD_HINTS)
