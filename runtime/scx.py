"""The kernel's sched_ext state in sysfs, and the pinned scx_layered's names for the runtime.

`/sys/kernel/sched_ext/state` reads `enabled`, `disabled`, `enabling` or
`disabling`; `/sys/kernel/sched_ext/root/ops` names the attached scheduler
(`layered_1.1.4_x86_64_unknown_linux_gnu`). The directory is absent on a
kernel built without sched_ext. The binary and its command line (finding it,
`--version`, the launch flags) are threadwise.scx's, the one module that runs
scx_layered; their names are re-exported here for the runtime's callers.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path

from threadwise.errors import MissingTool
from threadwise.scx import SCX_LAYERED_VERSION as SCX_VERSION
from threadwise.scx import scx_layered_path, scx_layered_version

__all__ = ["SCX_VERSION", "scx_layered_path", "scx_layered_version"]
SCHED_EXT = Path("/sys/kernel/sched_ext")
LAB_HINT = (
    "this host cannot attach sched_ext schedulers; use the lab VM: "
    "threadwise lab run -- threadwise apply CONFIG --duration 30"
)


@dataclass(frozen=True)
class SchedExtState:
    """A snapshot of /sys/kernel/sched_ext."""

    supported: bool
    state: str  # enabled / disabled / enabling / disabling / "" if unsupported
    ops: str  # root/ops, "" when nothing is attached

    @property
    def layered_attached(self) -> bool:
        return self.state == "enabled" and self.ops.startswith("layered")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def sched_ext_state(root: Path | None = None) -> SchedExtState:
    root = root or SCHED_EXT
    if not root.is_dir():
        return SchedExtState(supported=False, state="", ops="")
    return SchedExtState(supported=True, state=_read(root / "state"), ops=_read(root / "root" / "ops"))


def wait_for_state(want: str, timeout_s: float, root: Path | None = None) -> SchedExtState:
    """Poll until state == want or the timeout passes; return the last snapshot."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = sched_ext_state(root)
        if snap.state == want or time.monotonic() >= deadline:
            return snap
        time.sleep(0.1)


def require_sched_ext() -> SchedExtState:
    snap = sched_ext_state()
    if not snap.supported:
        raise MissingTool(
            f"this kernel ({platform.release()}) has no sched_ext "
            f"({SCHED_EXT} is absent; CONFIG_SCHED_CLASS_EXT is off)",
            hint=LAB_HINT,
        )
    return snap

