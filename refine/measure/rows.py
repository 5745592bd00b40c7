"""The ladder file's rows, typed: one dataclass per table of `sql/ladder.sql`.

Each dataclass is the one statement, in Python, of its table's columns: the
fields are the columns in the table's order (tests/refine/test_rows.py checks
them against ladder.sql), with the Python type of each column's SQL type, and
`None` as the default of exactly the nullable ones. `store.insert` derives its
column list from them, as observe's capture writer does from its records
(observe/store.py `RECORD_TABLES`). Fields are keyword-only, so a row reads
like the table it fills and the nullable columns may sit where the schema has
them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RunRow:
    run_id: int
    started: dt.datetime  # UTC, naive
    command: str
    purpose: str
    workload: str
    workload_toml: str
    primary_metric: str
    primary_direction: str
    secondary: str  # JSON list of {metric, direction}
    levels: str  # JSON list of spinner counts
    repeats: int
    arm_order: str
    seed: int
    window_s: float
    warmup_s: float
    host_kernel: str
    guest_kernel: str | None = None
    vcpus: int
    tcg: bool
    scx_version: str
    shape: str
    completed: bool
    stopped_reason: str | None = None
    host_priority: str | None = None  # lab: what it claimed of the host (None: on the host)
    wall_s: float | None = None  # schema 6: boot and attaches included (None: measured before)


@dataclass(frozen=True, kw_only=True)
class ArmRow:
    run_id: int
    arm: str
    kind: str  # 'baseline' or 'profile'
    profile_toml: str | None = None
    config_json: str | None = None  # LayerConfig.to_json(): the config's one serialisation
    attach_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class CellRow:
    run_id: int
    idx: int
    arm: str
    level: int
    repeat: int
    valid: bool
    reasons: str
    wall_s: float | None = None
    spinner_cpu_s: float | None = None
    generator_cpu_s: float | None = None
    scx_cpu_s: float | None = None
    service_cpu_s: float | None = None
    busy_cpu_s: float | None = None
    host_cpu_s: float | None = None
    host_wait_s: float | None = None
    state_before: str | None = None
    state_after: str | None = None


@dataclass(frozen=True, kw_only=True)
class SampleRow:
    run_id: int
    idx: int
    metric: str
    value: float


@dataclass(frozen=True, kw_only=True)
class MembershipRow:
    run_id: int
    idx: int
    tid: int
    comm: str
    expected_layer: str | None = None
    actual_layer: str | None = None


@dataclass(frozen=True, kw_only=True)
class ComparisonRow:
    run_id: int
    reference: str
    candidate: str
    metric: str
    level: int
    reference_median: float | None = None
    candidate_median: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_reference: int
    n_candidate: int
    verdict: str
    pairs: int | None = None
    pairs_disturbed: int | None = None
    floor: float | None = None
    method: str | None = None
    noise_sd: float | None = None
    noise_df: int | None = None
    aa_pairs: int | None = None


@dataclass(frozen=True, kw_only=True)
class FloorRow:
    run_id: int
    metric: str
    level: int | None = None  # None: one floor for every level
    n: int
    floor: float
    aa_pairs: int
    method: str


@dataclass(frozen=True, kw_only=True)
class StepRow:
    step: int
    run_id: int | None = None  # None: not measured (rejected)
    candidate: str
    description: str
    decision: str
    reason: str
    toml_diff: str
    noise: float
    decision_seed: str
    floors_run: int | None = None
    chosen_because: str | None = None


@dataclass(frozen=True, kw_only=True)
class BlockerRow:
    run_id: int
    idx: int
    arm: str
    level: int
    waiter_group: str
    blocker: str
    blocker_group: str | None = None
    cpu: int
    wait_s: float
    waits: int


@dataclass(frozen=True, kw_only=True)
class TrainingRow:
    name: str
    workload: str
    command: str
    profile_path: str
    wall_s: float | None = None
    limitations: str  # JSON list of sentences


@dataclass(frozen=True, kw_only=True)
class ScreenRow:
    run_id: int | None = None
    arm: str | None = None
    candidate: str
    description: str
    reserve_cores: int
    rejected: str | None = None
    loss: float | None = None
    gain: float | None = None
    screen_rank: int | None = None
    chosen: bool
    toml_diff: str
    rank_rule: str


LadderRow = (RunRow | ArmRow | CellRow | SampleRow | MembershipRow | ComparisonRow | FloorRow | StepRow
             | BlockerRow | TrainingRow | ScreenRow)
# table -> the type of its rows: the whitelist of table names that reach SQL text (store.insert)
ROW_TYPES: dict[str, type[LadderRow]] = {
    "run": RunRow, "arm": ArmRow, "cell": CellRow, "sample": SampleRow, "membership": MembershipRow,
    "comparison": ComparisonRow, "floor": FloorRow, "step": StepRow, "blocker": BlockerRow,
    "training": TrainingRow, "screen": ScreenRow,
}
