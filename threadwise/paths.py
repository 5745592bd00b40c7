"""Where threadwise keeps things outside the repository (caches keyed by version)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """~/.cache/threadwise (or $THREADWISE_CACHE), created on demand."""
    root = os.environ.get("THREADWISE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "threadwise"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path

