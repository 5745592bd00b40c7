"""The pinned scx_layered: one version and one place to find it, for every stage.

synthesize's matcher set, its `--print-and-exit` oracle and the runtime all
speak to this exact version; scripts/setup-scx.sh builds it into the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from threadwise.errors import MissingTool
from threadwise.paths import cache_dir

SCX_LAYERED_VERSION = "1.1.4"
ENV_BINARY = "THREADWISE_SCX_LAYERED"   # override: a binary of the same version elsewhere


def scx_layered_path() -> Path:
    """$THREADWISE_SCX_LAYERED, else the cached build; MissingTool naming the set-up step."""
    override = os.environ.get(ENV_BINARY)
    path = (Path(override) if override
            else cache_dir() / f"scx_layered-{SCX_LAYERED_VERSION}" / "bin" / "scx_layered")
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingTool(
            f"scx_layered {SCX_LAYERED_VERSION} not found at {path}",
            hint=f"run scripts/setup-scx.sh (cargo install, about 4 minutes the first time), "
                 f"or point ${ENV_BINARY} at the binary",
        )
    return path
