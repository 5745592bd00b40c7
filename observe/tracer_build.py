"""Build the libbpf tracer (tracers/sched.bpf.c, sched.c, sched.h) and layerof.c once per source version.

Problem: the tracer is C against the running kernel's BTF; set-up must build it on a fresh
machine, repeat runs must not rebuild it, and a missing compiler must say which package to
install rather than fail deep inside a capture.
Approach: the build is keyed by a hash of the four sources and this file; the binary lives in
`~/.cache/threadwise/tracer-<hash>/threadwise-sched` (or THREADWISE_CACHE). Steps, as in bcc's
libbpf-tools: `bpftool btf dump` of /sys/kernel/btf/vmlinux -> vmlinux.h; clang -target bpf ->
sched.bpf.o (CO-RE, so it runs on other kernels too); `bpftool gen skeleton` -> sched.skel.h;
cc sched.c -lbpf -lelf -lz; and cc layerof.c, the lab's reader of scx_layered's placement.
It builds in a temporary directory beside the target and renames it into place, so a build that
fails or is killed never leaves a half-built tracer.

Usage: python -m threadwise.observe.tracer_build [--cache DIR] [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from threadwise.errors import MissingTool, TracerError
from threadwise.paths import cache_dir, find_program

SOURCES = ("sched.bpf.c", "sched.c", "sched.h", "layerof.c")
BINARY = "threadwise-sched"
# layerof.c: not a tracer but a reader of scx_layered's per-task placement (the lab's membership
# probe); built here because it needs the same compiler and libbpf, and nothing else
LAYER_OF = "threadwise-layer-of"
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
CLANGS = ("clang-19", "clang")
# tool -> the Debian package that provides it (scripts/setup-system.sh installs them)
PACKAGES = {"clang": "clang-19", "bpftool": "bpftool", "cc": "gcc", "libbpf": "libbpf-dev",
            "libelf": "libelf-dev", "zlib": "zlib1g-dev"}


def source_dir() -> Path:
    return Path(str(resources.files("threadwise.observe").joinpath("tracers")))


def source_hash(src: Path | None = None) -> str:
    src = src or source_dir()
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def binary_path(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"tracer-{source_hash()}" / BINARY


def layer_of_path(cache: Path | None = None) -> Path:
    """threadwise-layer-of, built beside the tracer (same cache directory)."""
    return binary_path(cache).parent / LAYER_OF


def _tool(names: tuple[str, ...], what: str) -> str:
    for name in names:
        found = find_program(name)
        if found:
            return found
    raise MissingTool(f"{names[0]} not found (needed to build the libbpf tracer)",
                      hint=f"apt-get install {PACKAGES[what]} (scripts/setup-system.sh installs it)")


def _run(argv: list[str], step: str, *, stdout: Path | None = None) -> None:
    with open(stdout, "wb") if stdout else open(os.devnull, "wb") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        hint = None
        for header, package in (("bpf/libbpf.h", "libbpf-dev"), ("gelf.h", "libelf-dev"),
                                ("-lelf", "libelf-dev"), ("-lz", "zlib1g-dev"), ("-lbpf", "libbpf-dev")):
            if header in err:
                hint = f"apt-get install {package}"
        raise TracerError(f"building the libbpf tracer failed at {step}: {err[-800:]}",
                          hint=hint or "see the compiler's message above")


def build(cache: Path | None = None, *, force: bool = False,
          progress: Callable[[str], None] = print) -> Path:
    """The tracer binary for the current sources, built if it is not in the cache yet."""
    target = binary_path(cache)
    if target.is_file() and not force:
        return target
    if not VMLINUX_BTF.is_file():
        raise MissingTool(f"{VMLINUX_BTF} is missing: the kernel has no BTF, which CO-RE needs",
                          hint="use a kernel built with CONFIG_DEBUG_INFO_BTF=y, or --backend bpftrace")
    clang = _tool(CLANGS, "clang")
    bpftool = _tool(("bpftool",), "bpftool")
    cc = _tool(("cc", "gcc"), "cc")
    src = source_dir()
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    progress(f"tracer: building {BINARY} ({source_hash()}) ...")
    with tempfile.TemporaryDirectory(prefix=".tracer-build-", dir=target.parent.parent) as tmp:
        work = Path(tmp)
        _run([bpftool, "btf", "dump", "file", str(VMLINUX_BTF), "format", "c"], "vmlinux.h",
             stdout=work / "vmlinux.h")
        _run([clang, "-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86", f"-I{work}", f"-I{src}",
              "-c", str(src / "sched.bpf.c"), "-o", str(work / "sched.bpf.o")], "clang (sched.bpf.c)")
        _run([bpftool, "gen", "skeleton", str(work / "sched.bpf.o"), "name", "sched_bpf"], "skeleton",
             stdout=work / "sched.skel.h")
        _run([cc, "-O2", "-g", "-Wall", f"-I{work}", f"-I{src}", str(src / "sched.c"), "-lbpf", "-lelf",
              "-lz", "-o", str(work / BINARY)], "cc (sched.c)")
        _run([cc, "-O2", "-g", "-Wall", str(src / "layerof.c"), "-lbpf", "-lelf", "-lz",
              "-o", str(work / LAYER_OF)], "cc (layerof.c)")
        final = work / "out"
        final.mkdir()
        (work / BINARY).rename(final / BINARY)
        (work / LAYER_OF).rename(final / LAYER_OF)
        (work / "sched.bpf.o").rename(final / "sched.bpf.o")
        if target.parent.exists():
            shutil.rmtree(target.parent)
        final.rename(target.parent)
    progress(f"tracer: built {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build threadwise's libbpf tracer (cached by source hash).")
    parser.add_argument("--cache", type=Path, help="cache directory (default ~/.cache/threadwise)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even if a build is cached")
    args = parser.parse_args(argv)
    try:
        path = build(args.cache, force=args.rebuild, progress=lambda m: print(m, file=sys.stderr))
    except (MissingTool, TracerError) as error:
        print(f"error: {error.message}", file=sys.stderr)
        if error.hint:
            print(f"hint: {error.hint}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
