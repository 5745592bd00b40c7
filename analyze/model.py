"""The result of analyzing one capture (docs/interfaces.md: Analysis)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

ANALYSIS_SCHEMA_VERSION = 1

# Analysis.groups: the columns of the binding contract, in order...
CONTRACT_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "pattern": pl.String, "role": pl.String, "confidence": pl.Float64,
    "match_prefixes": pl.List(pl.String), "exclude_prefixes": pl.List(pl.String),
    "separable": pl.Boolean, "thread_count": pl.Int64, "names": pl.List(pl.String),
    "cpu_time_ns": pl.Int64, "cpu_share": pl.Float64, "max_thread_share": pl.Float64,
    "hot_threads": pl.Int64, "slice_p50_ns": pl.Int64, "slice_p99_ns": pl.Int64,
    "wakeups_per_s": pl.Float64, "rq_latency_p50_ns": pl.Int64, "rq_latency_p99_ns": pl.Int64,
    "in_wake_chain": pl.Boolean, "avg_runtime_range_ns": pl.List(pl.Int64),
}
# ...then evidence columns (additive; select by name).
EVIDENCE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "group_id": pl.Int64, "demand": pl.Float64, "involuntary_frac": pl.Float64,
    "wake_interval_cv": pl.Float64, "wait_behind_other_share": pl.Float64,
    "slices": pl.Int64, "involuntary": pl.Int64, "wakeups": pl.Int64, "note": pl.String,
}
GROUP_SCHEMA = {**CONTRACT_SCHEMA, **EVIDENCE_SCHEMA}


@dataclass
class Analysis:
    """Groups (one row per name-pattern group of the target) and the evidence behind them."""

    groups: pl.DataFrame
    process_name: str
    duration_ns: int
    nr_cpus: int
    events_lost: int
    caveats: list[str] = field(default_factory=list)
    threads: pl.DataFrame = field(default_factory=pl.DataFrame)      # per-thread features
    wake_edges: pl.DataFrame = field(default_factory=pl.DataFrame)   # waker -> wakee, causal flag
    chains: pl.DataFrame = field(default_factory=pl.DataFrame)       # thread-level chains
    pattern_chains: pl.DataFrame = field(default_factory=pl.DataFrame)
    preemptors: pl.DataFrame = field(default_factory=pl.DataFrame)   # who preempted whom
    smt_corun: pl.DataFrame = field(default_factory=pl.DataFrame)
    capture_id: str = ""
    capture_path: Path | None = None
    names_separate_roles: bool = True

    def to_dict(self, *, threads: bool = True) -> dict[str, Any]:
        """Plain JSON-ready data (lists and numbers; NaN/inf become null)."""
        out: dict[str, Any] = {
            "analysis_schema_version": ANALYSIS_SCHEMA_VERSION,
            "capture_id": self.capture_id,
            "capture": str(self.capture_path) if self.capture_path else None,
            "process_name": self.process_name, "duration_ns": self.duration_ns,
            "nr_cpus": self.nr_cpus, "events_lost": self.events_lost,
            "names_separate_roles": self.names_separate_roles, "caveats": self.caveats,
            "groups": _rows(self.groups),
            "pattern_chains": _rows(self.pattern_chains),
            "wake_edges": _rows(self.wake_edges.filter(pl.col("causal")) if "causal" in self.wake_edges
                                else self.wake_edges),
            "preemptors": _rows(self.preemptors),
        }
        if threads:
            out["threads"] = _rows(self.threads)
            out["chains"] = _rows(self.chains)
            out["smt_corun"] = _rows(self.smt_corun)
        return out


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in frame.iter_rows(named=True)]
