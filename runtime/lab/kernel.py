"""The lab kernel: fetch a Debian kernel with sched_ext into the cache.

Problem: the host kernel has no sched_ext, so scx_layered runs in a VM whose
kernel must have `CONFIG_SCHED_CLASS_EXT=y`, and getting one must not touch
the machine's apt sources (LAB.md: that once replaced the libc).

Approach: read trixie-backports' `Packages.xz` over HTTP, pick the newest
`linux-binary-<release>-cloud-amd64` with its `linux-base-<release>` and
`linux-modules-<release>` (`debian.py`), download the three .debs, check each
SHA256 against the index, unpack with `dpkg-deb -x` into a scratch directory,
and keep only `vmlinuz`, `config` and two modules, decompressed: `overlay.ko`
(the vng guest loads it to get writable overlays, see `vng.py`) and
`virtio_blk.ko` (the initramfs guest reads its runtime-tree disk with it,
runtime/lab/runtimes.py), in
`<cache>/lab-kernel/<release>/` with a `manifest.json`. The
directory is renamed into place only when complete and verified, so an
interrupted fetch never looks cached. A cached kernel is reused without any
network access unless `refresh=True`.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from threadwise.errors import DownloadError, InputError, MissingTool
from threadwise.paths import cache_dir
from threadwise.runtime.lab import debian

# Boot arguments of every lab guest. `tsc=reliable`: the guest's clocksource watchdog compares TSC
# with the emulated HPET, and a busy host delays one read against the other; CI's canary lab of
# 2026-12-01 had TSC marked unstable ("frequency skew", 0.5 ms in 0.5 s) 223 s into its boot and
# the guest switched to HPET, whose reads cost 2-3x TSC's under TCG (9-12 us against 4 us per
# clock_gettime from Python, measured in the lab on a quiet host), mid-run. Under TCG the guest's
# TSC is read from the host's, so no skew between vCPUs is there to be caught.
GUEST_KERNEL_ARGS = ("tsc=reliable",)

REQUIRED_CONFIG = ("CONFIG_SCHED_CLASS_EXT=y", "CONFIG_VIRTIO_FS=y", "CONFIG_BPF_SYSCALL=y")
# Modules the lab keeps: name -> path under the release's kernel/ directory. Both are =m in
# Debian's cloud kernel; neither depends on another module (modinfo: depends= empty).
MODULES = {"overlay": "fs/overlayfs/overlay", "virtio_blk": "drivers/block/virtio_blk"}
KERNEL_HINT = "run `threadwise lab kernel` (downloads a Debian kernel with sched_ext, ~37 MB)"


@dataclass(frozen=True)
class LabKernel:
    release: str
    directory: Path

    @property
    def vmlinuz(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def config(self) -> Path:
        return self.directory / "config"

    @property
    def overlay_module(self) -> Path:
        return self.directory / "overlay.ko"

    @property
    def virtio_blk_module(self) -> Path:
        """The initramfs guest loads it to read its runtime-tree disk (runtime/lab/runtimes.py)."""
        return self.directory / "virtio_blk.ko"

    @property
    def modules(self) -> tuple[Path, ...]:
        return (self.overlay_module, self.virtio_blk_module)

    @property
    def manifest(self) -> dict:
        return json.loads((self.directory / "manifest.json").read_text())


def kernels_dir() -> Path:
    return cache_dir() / "lab-kernel"


def missing_config(config_text: str) -> list[str]:
    """The REQUIRED_CONFIG lines absent from a kernel config."""
    lines = set(config_text.splitlines())
    return [want for want in REQUIRED_CONFIG if want not in lines]


def cached_kernels() -> list[LabKernel]:
    """Complete cached kernels, newest Debian version first."""
    found = []
    root = kernels_dir()
    if not root.is_dir():
        return []
    for entry in root.iterdir():
        if entry.name.startswith(".") or not (entry / "manifest.json").is_file():
            continue
        kernel = LabKernel(release=entry.name, directory=entry)
        if all(p.is_file() for p in (kernel.vmlinuz, kernel.config, *kernel.modules)):
            found.append(kernel)

    def version(kernel: LabKernel) -> str:
        return str(kernel.manifest.get("binary", {}).get("version", "0"))

    ordered: list[LabKernel] = []
    for kernel in found:  # insertion sort with dpkg ordering (a handful of entries)
        at = 0
        while at < len(ordered) and debian.compare_versions(version(ordered[at]), version(kernel)) > 0:
            at += 1
        ordered.insert(at, kernel)
    return ordered


def find_lab_kernel() -> LabKernel:
    """The newest cached lab kernel, or a MissingTool error naming the fix."""
    kernels = cached_kernels()
    if not kernels:
        raise MissingTool(f"lab kernel not in cache ({kernels_dir()})", hint=KERNEL_HINT)
    return kernels[0]


def _fetch(url: str, timeout: float = 60.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise DownloadError(
            f"cannot download {url}: {error}",
            hint="the lab kernel comes from deb.debian.org; check network access",
        ) from error


def _download_checked(url: str, package: debian.DebPackage, target: Path) -> None:
    data = _fetch(url, timeout=300.0)
    digest = hashlib.sha256(data).hexdigest()
    if digest != package.sha256 or len(data) != package.size:
        raise DownloadError(
            f"{package.name}: SHA256 {digest} (size {len(data)}) does not match the index "
            f"({package.sha256}, size {package.size})",
            hint="retry; if it persists the mirror is inconsistent",
        )
    target.write_bytes(data)


def _find_one(root: Path, patterns: tuple[str, ...], what: str) -> Path:
    for pattern in patterns:
        hits = sorted(root.glob(pattern))
        if hits:
            return hits[0]
    raise InputError(f"no {what} in the unpacked packages (looked for {', '.join(patterns)})")


def fetch_lab_kernel(*, refresh: bool = False, log: Callable[[str], None] = lambda _msg: None) -> LabKernel:
    """Return the cached lab kernel, downloading the newest one when needed."""
    cached = cached_kernels()
    if cached and not refresh:
        log(f"lab kernel {cached[0].release} cached at {cached[0].directory}")
        return cached[0]
    if shutil.which("dpkg-deb") is None:
        raise MissingTool("dpkg-deb not found", hint="run on Debian (package dpkg)")
    url = debian.index_url()
    log(f"reading {url}")
    text = lzma.decompress(_fetch(url)).decode("utf-8", "replace")
    choice = debian.choose_kernel(debian.parse_packages(text))
    target = kernels_dir() / choice.release
    if any(kernel.directory == target for kernel in cached):
        log(f"lab kernel {choice.release} (newest in {debian.SUITE}) already cached")
        return LabKernel(choice.release, target)
    kernels_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kernels_dir(), prefix=".fetch-") as scratch_name:
        scratch = Path(scratch_name)
        unpacked = scratch / "root"
        for package in choice.packages:
            deb = scratch / Path(package.filename).name
            log(f"downloading {package.name} {package.version} ({package.size // 1024} KiB)")
            _download_checked(f"{debian.ARCHIVE}/{package.filename}", package, deb)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        vmlinuz = _find_one(
            unpacked,
            (f"usr/lib/modules/{choice.release}/vmlinuz", f"boot/vmlinuz-{choice.release}"),
            "vmlinuz",
        )
        config = _find_one(
            unpacked,
            (f"usr/lib/modules/{choice.release}/config", f"boot/config-{choice.release}"),
            "kernel config",
        )
        absent = missing_config(config.read_text(errors="replace"))
        if absent:
            raise InputError(
                f"{choice.binary.name}: kernel config lacks {', '.join(absent)}",
                hint="the archive's newest kernel cannot host the lab; report it",
            )
        modules = {
            name: _find_one(unpacked, (f"usr/lib/modules/{choice.release}/kernel/{where}.ko*",),
                            f"{name} module")
            for name, where in MODULES.items()
        }
        staged = scratch / choice.release
        staged.mkdir()
        shutil.copy2(vmlinuz, staged / "vmlinuz")
        shutil.copy2(config, staged / "config")
        for name, module in modules.items():
            raw = module.read_bytes()
            (staged / f"{name}.ko").write_bytes(lzma.decompress(raw) if module.suffix == ".xz" else raw)
        manifest = {
            "release": choice.release,
            "index": url,
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "verified": list(REQUIRED_CONFIG),
            "binary": vars(choice.binary),
            "base": vars(choice.base),
            "modules": vars(choice.modules),
        }
        (staged / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    log(f"lab kernel {choice.release} verified (CONFIG_SCHED_CLASS_EXT=y) at {target}")
    return LabKernel(choice.release, target)
