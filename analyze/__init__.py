"""The analyze stage: per-thread features, wake graph, name patterns and roles.

The interfaces other stages and notebooks use (docs/interfaces.md):
`analyze_capture(path) -> Analysis`, `capture_threads(path) -> CaptureThreads`
(per-thread features), and `contract` (Role, is_hot, GroupRow, AnalysisRecord).
Imports are lazy so `threadwise --help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadwise.analyze.api import CaptureThreads, analyze_capture, capture_threads
    from threadwise.analyze.model import Analysis

__all__ = ["Analysis", "CaptureThreads", "analyze_capture", "capture_threads"]


def __getattr__(name: str) -> Any:
    if name in ("analyze_capture", "capture_threads", "CaptureThreads"):
        # deferred: api loads polars, duckdb and sklearn; the package stays light to import
        from threadwise.analyze import api

        return getattr(api, name)
    if name == "Analysis":
        # deferred: model loads polars; the package stays light to import
        from threadwise.analyze.model import Analysis

        return Analysis
    raise AttributeError(name)
