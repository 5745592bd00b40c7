"""The analyze stage: per-thread features, wake graph, name patterns and roles.

`analyze_capture(path) -> Analysis` is the API later stages and notebooks use
(docs/interfaces.md). Imports are lazy so `threadwise --help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadwise.analyze.api import analyze_capture
    from threadwise.analyze.model import Analysis

__all__ = ["Analysis", "analyze_capture"]


def __getattr__(name: str) -> Any:
    if name == "analyze_capture":
        from threadwise.analyze.api import analyze_capture

        return analyze_capture
    if name == "Analysis":
        from threadwise.analyze.model import Analysis

        return Analysis
    raise AttributeError(name)
