"""`threadwise runtime info`: what this machine offers the runtime and the lab."""

from __future__ import annotations

import platform
import shutil
import subprocess

from threadwise.errors import MissingTool
from threadwise.runtime import scx
from threadwise.runtime.lab import kernel
from threadwise.runtime.lab import vng as lab


def _qemu_version() -> str | None:
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        return None
    done = subprocess.run([qemu, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.stdout else None


def gather_info() -> dict:
    """A JSON-able report; never raises for something missing."""
    snap = scx.sched_ext_state()
    info: dict = {
        "scx_layered": {"pinned": scx.SCX_VERSION, "path": None, "version": None},
        "kernel": {
            "release": platform.release(),
            "sched_ext": snap.supported,
            "state": snap.state or None,
            "ops": snap.ops or None,
        },
        "lab": {},
    }
    try:
        path = scx.scx_layered_path()
        info["scx_layered"].update(path=str(path), version=scx.scx_layered_version(path))
    except MissingTool as missing:
        info["scx_layered"]["problem"] = f"{missing.message} ({missing.hint})"
    kernels = kernel.cached_kernels()
    info["lab"]["kernel"] = (
        {"release": kernels[0].release, "vmlinuz": str(kernels[0].vmlinuz)} if kernels else None
    )
    for name, finder in (("vng", lab.find_vng), ("virtiofsd", lab.find_virtiofsd)):
        try:
            info["lab"][name] = str(finder())
        except MissingTool:
            info["lab"][name] = None
    info["lab"]["qemu"] = _qemu_version()
    return info


def format_info(info: dict) -> str:
    scx_info, kern, lab_info = info["scx_layered"], info["kernel"], info["lab"]
    lines = [
        f"scx_layered  {scx_info['version'] or 'MISSING'}"
        + (f"  {scx_info['path']}" if scx_info["path"] else f"  ({scx_info.get('problem')})"),
    ]
    if kern["sched_ext"]:
        ops = f", ops {kern['ops']}" if kern["ops"] else ""
        lines.append(f"kernel       {kern['release']}: sched_ext yes (state {kern['state']}{ops})")
    else:
        lines.append(
            f"kernel       {kern['release']}: sched_ext NO (/sys/kernel/sched_ext absent); "
            "apply runs only in the lab: threadwise lab run -- threadwise apply ..."
        )
    lab_kernel = lab_info["kernel"]
    lines.append(
        "lab kernel   "
        + (
            f"{lab_kernel['release']}  {lab_kernel['vmlinuz']}"
            if lab_kernel
            else "not in cache (threadwise lab kernel)"
        )
    )
    for name in ("vng", "virtiofsd", "qemu"):
        lines.append(f"{name:<12} {lab_info[name] or 'MISSING (scripts/setup-lab.sh)'}")
    return "\n".join(lines)
