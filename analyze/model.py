"""The result of analyzing one capture (docs/interfaces.md: Analysis).

The contract is declared once, in contract.py, and derived here: the polars
schema of the groups from `contract.GroupRow`, and from `AnalysisRecord`'s
other fields (`RECORD_FIELDS`) both the stored `analysis_meta` table
(`META_SCHEMA`, which store.py writes) and the scalars of `to_dict`. So a
field added to the record is stored, exported and checked against the docs
without another list to edit; `Analysis` declares the same fields (it holds
frames, not typed rows), and tests/analyze/test_record.py keeps the two equal.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from threadwise.analyze.contract import RECORD_FIELDS, AnalysisRecord, GroupRow, Role

ANALYSIS_SCHEMA_VERSION = 1
PolarsType = pl.DataType | type[pl.DataType]

_SCALARS: dict[object, PolarsType] = {str: pl.String, Role: pl.String, int: pl.Int64,
                                      float: pl.Float64, bool: pl.Boolean}


def _polars_type(annotation: object) -> PolarsType:
    """The polars dtype of a contract field's annotation (Optional unwrapped: columns are nullable)."""
    if isinstance(annotation, types.UnionType):
        (annotation,) = (a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return pl.List(_SCALARS[item])
    return _SCALARS[annotation]


# Analysis.groups: the columns of the binding contract, in order (contract.GroupRow)...
CONTRACT_SCHEMA: dict[str, PolarsType] = {
    name: _polars_type(hint) for name, hint in typing.get_type_hints(GroupRow).items()
}
# ...then evidence columns (additive; select by name).
EVIDENCE_SCHEMA: dict[str, PolarsType] = {
    "group_id": pl.Int64, "demand": pl.Float64, "involuntary_frac": pl.Float64,
    "wake_interval_cv": pl.Float64, "wait_behind_other_share": pl.Float64,
    "slices": pl.Int64, "involuntary": pl.Int64, "wakeups": pl.Int64, "note": pl.String,
    "request_driven": pl.Float64,
}
GROUP_SCHEMA = {**CONTRACT_SCHEMA, **EVIDENCE_SCHEMA}

# analysis_meta, the one-row table of a stored analysis: what it is and whose (the schema
# version, the capture's id, when), then one column per field of the record but `groups`.
_RECORD_TYPES = typing.get_type_hints(AnalysisRecord)
META_SCHEMA: dict[str, PolarsType] = {
    "analysis_schema_version": pl.Int32, "capture_id": pl.String, "analyzed_at": pl.Datetime("us"),
    **{name: _polars_type(_RECORD_TYPES[name]) for name in RECORD_FIELDS},
}


@dataclass
class Analysis:
    """Groups (one row per name-pattern group of the target) and the evidence behind them.

    Every field of `AnalysisRecord` is one here too, by the same name (`groups` a DataFrame);
    the rest are evidence frames and where the analysis came from.
    """

    groups: pl.DataFrame
    process_name: str
    duration_ns: int
    nr_cpus: int
    events_lost: int = 0
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
    cgroup: str | None = None   # the cgroup observe targeted (a pod's), else None
    cgroup_cpu_quota_us: int | None = None    # its CPU limit per period (None: no limit or not read)
    cgroup_cpu_period_us: int | None = None   # None: the limit was not read
    short_lived: list[str] = field(default_factory=list)   # names of threads grouped nowhere (too short)

    def record(self) -> AnalysisRecord:
        """The contract part as typed rows (what synthesize builds a profile from)."""
        return AnalysisRecord.of(self)

    def scalars(self) -> dict[str, Any]:
        """The record's fields but `groups`, by name and in order (RECORD_FIELDS)."""
        return {name: getattr(self, name) for name in RECORD_FIELDS}

    def to_dict(self, *, threads: bool = True) -> dict[str, Any]:
        """Plain JSON-ready data (lists and numbers; NaN/inf become null)."""
        out: dict[str, Any] = {
            "analysis_schema_version": ANALYSIS_SCHEMA_VERSION,
            "capture_id": self.capture_id,
            "capture": str(self.capture_path) if self.capture_path else None,
            **self.scalars(),
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
