"""Runtime trees for the lab guest: a read-only ext4 disk holding the interpreter trees a plan needs.

Problem: the initramfs guest (initramfs.py) carries single programs with the
shared libraries `ldd` lists. A JVM, CPython or a venv needs a whole tree
(JAVA_HOME with its `lib/modules` and `libjvm.so`; the stdlib, `lib-dynload`
and site-packages), hundreds of MB that the initramfs would unpack into guest
RAM at every boot, and that ldd does not see (the JVM dlopens its own
libraries; CPython imports extension modules by path).

Approach:
- `interpreter_trees` names the trees of a known interpreter: Java's home
  (the real binary's grandparent, recognised by `lib/modules`); for CPython
  and PyPy, the interpreter itself is asked (`sys.prefix`, `sys.path`): a
  venv's prefix, and each existing `sys.path` directory (the stdlib,
  lib-dynload, site-packages). Nested site-packages not on `sys.path`, the
  stdlib's own test suite and its static-build `config-*` directory are
  skipped. Node is a single ELF program and needs no tree.
- A directory among a command's arguments (a classpath, an app's folder)
  is a tree too (`argument_tree`).
- `build_disk` copies the trees into a staging directory at their host paths
  and writes an ext4 image with `mkfs.ext4 -d` (no root, no loop device, no
  journal), cached under `<cache>/runtime-disks/<sha256>/`, the hash taken
  over every path, mode, link target and file content, so a changed tree
  builds a new disk and an unchanged one is reused. A symlink that leaves the
  carried trees (Debian's JDK links `conf/*` into `/etc/java-17-openjdk`) is
  copied as the file it names, so the disk needs nothing outside itself.
- The same pass lists the shared libraries the trees' ELF files need from
  outside the trees (libstdc++, libz, libffi, libpython); they go into the
  initramfs with the packer's other libraries. A library this host lacks
  (e.g. libX11 for the JDK's AWT) is recorded as missing, not fatal: a
  headless service never loads it.
- In the guest, `guest/init` loads `virtio_blk.ko` (a module of the lab
  kernel, kept by runtime/lab/kernel.py), mounts `/dev/vda` read-only on `/rt`
  and bind-mounts each tree at its own path, so the plan's paths and the
  trees' internal links hold unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.errors import InitramfsError, MissingTool
from threadwise.paths import cache_dir

DISK_VERSION = 1  # bump when the disk's layout changes: old cached disks are not reused
# Directories a tree may not be: carrying them would mean carrying the host.
TOO_WIDE = frozenset({"/", "/usr", "/usr/local", "/usr/lib", "/usr/share", "/opt", "/etc", "/var",
                      "/home", "/root", "/srv", "/lib", "/lib64", "/bin", "/sbin"})
MAX_TREE_BYTES = 4 << 30  # a disk beyond this is almost certainly a wrong path
JAVA_NAMES = ("java",)
PYTHON_PREFIXES = ("python", "pypy")
# Asked from a Python interpreter: where it lives and what it imports from.
PYTHON_PROBE = ("import json, sys; print(json.dumps({'prefix': sys.prefix, 'base': sys.base_prefix, "
                "'executable': sys.executable, 'path': [p for p in sys.path if p]}))")


@dataclass(frozen=True)
class Tree:
    """A host directory carried at its own path, minus `skip` (paths relative to it)."""

    path: str
    skip: tuple[str, ...] = ()
    why: str = ""


@dataclass
class Disk:
    """A built runtime disk: the image, its trees and what the trees need outside themselves."""

    image: Path
    trees: list[Tree]
    libraries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # sonames this host lacks (not fatal)
    bytes: int = 0


def is_runtime(name: str) -> bool:
    """An interpreter the disk can carry (by the program's name or its real name)."""
    return name in JAVA_NAMES or name.startswith(PYTHON_PREFIXES)


def interpreter_trees(path: Path) -> tuple[list[Tree], Path]:
    """The trees `path` (java, python, pypy; a link chain or a pyenv shim) needs to run, and the
    real program it runs."""
    real = path.resolve()
    if path.name in JAVA_NAMES or real.name in JAVA_NAMES:
        home = real.parent.parent
        if real.parent.name != "bin" or not (home / "lib" / "modules").is_file():
            raise InitramfsError(f"{path} resolves to {real}, which is not inside a Java home "
                                 "(no ../lib/modules beside its bin/)",
                                 hint="name the java binary of a JDK or JRE, e.g. "
                                      "/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
        return [Tree(str(home), why=f"Java home of {path}")], real
    return _python_trees(path)


def _python_trees(path: Path) -> tuple[list[Tree], Path]:
    done = subprocess.run([str(path), "-I", "-c", PYTHON_PROBE], capture_output=True, text=True,
                          check=False, timeout=60)
    if done.returncode != 0:
        raise InitramfsError(f"{path} -c '...' failed (exit {done.returncode}): "
                             f"{done.stderr.strip()[-300:]}",
                             hint="name a working interpreter by its path (a venv's bin/python, or "
                                  "$(pyenv which python3) rather than a pyenv shim)")
    facts = json.loads(done.stdout)
    on_path = [p for p in facts["path"] if Path(p).is_dir()]
    trees: list[Tree] = []
    if facts["prefix"] != facts["base"]:  # a venv: its own folder (pyvenv.cfg, bin, site-packages)
        trees.append(Tree(facts["prefix"], why=f"venv of {path}"))
    for directory in on_path:
        skip = tuple(sorted(_python_skips(Path(directory), on_path)))
        trees.append(Tree(directory, skip, why=f"on {path}'s sys.path"))
    return trees, Path(facts["executable"]).resolve()


def _python_skips(directory: Path, on_path: list[str]) -> Iterator[str]:
    """What a sys.path directory holds that the interpreter never imports from there."""
    for child in ("site-packages", "dist-packages"):
        nested = directory / child
        if nested.is_dir() and str(nested) not in on_path:
            yield child  # the base's packages under a venv (not on its sys.path)
    if (directory / "os.py").is_file():  # the stdlib
        yield from (p.name for p in directory.iterdir()
                    if p.is_dir() and (p.name == "test" or p.name.startswith("config-")))


def argument_tree(path: str) -> Tree | None:
    """A directory a command names among its arguments (a classpath entry, `-Dx=/dir`, an app
    folder) as a tree, or None when it is not a real directory (a symlink to one is not carried)."""
    if Path(path).is_dir() and not Path(path).is_symlink():
        return Tree(str(Path(path)), why="named by the command")
    return None


def outermost(trees: Iterable[Tree]) -> list[Tree]:
    """Trees with the ones inside another dropped (the outer one carries them)."""
    ordered = sorted({t.path: t for t in trees}.values(), key=lambda t: t.path)
    kept: list[Tree] = []
    for tree in ordered:
        if tree.path in TOO_WIDE:
            raise InitramfsError(f"{tree.why or 'a command'} needs {tree.path} carried whole, which "
                                 "would carry most of this host",
                                 hint="name a narrower directory (the app's own folder, a venv)")
        if not any(tree.path.startswith(k.path.rstrip("/") + "/") for k in kept):
            kept.append(tree)
    return kept


# --- walking, hashing and building ---------------------------------------------------------------


def _inside(path: str, trees: list[Tree]) -> bool:
    return any(path == t.path or path.startswith(t.path.rstrip("/") + "/") for t in trees)


def _walk(tree: Tree) -> Iterator[Path]:
    """Every entry of the tree, sorted, minus its skips; links are not followed."""
    root = Path(tree.path)
    skips = {root / s for s in tree.skip}
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        dirs[:] = sorted(d for d in dirs if here / d not in skips)
        for name in [*dirs, *sorted(files)]:
            yield here / name


def _entry(path: Path, trees: list[Tree]) -> tuple[str, Path | str | None]:
    """("dir" | "file" | "link" | "other", source): a link that leaves the trees becomes its file."""
    if path.is_symlink():
        target = os.readlink(path)
        resolved = os.path.realpath(path)
        if _inside(resolved, trees) or not os.path.exists(resolved):
            return "link", target  # inside the disk, or dangling (docs, man pages): keep as is
        return ("file", Path(resolved)) if os.path.isfile(resolved) else ("other", None)
    if path.is_dir():
        return "dir", None
    if path.is_file():
        return "file", path
    return "other", None


def content_hash(trees: list[Tree]) -> tuple[str, int]:
    """sha256 over every carried path, mode, link target and file content; and the bytes carried."""
    digest = hashlib.sha256(f"threadwise-runtime-disk {DISK_VERSION}\n".encode())
    total = 0
    for tree in trees:
        digest.update(f"tree {tree.path} skip {','.join(tree.skip)}\n".encode())
        for path in _walk(tree):
            kind, source = _entry(path, trees)
            digest.update(f"{kind} {path}\n".encode())
            if kind == "link":
                digest.update(f"-> {source}\n".encode())
            elif kind == "file":
                assert isinstance(source, Path)
                digest.update(f"mode {stat.S_IMODE(source.stat().st_mode):o}\n".encode())
                with source.open("rb") as handle:
                    while chunk := handle.read(1 << 20):
                        digest.update(chunk)
                total += source.stat().st_size
    return digest.hexdigest(), total


def _is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def ldd(path: Path) -> tuple[list[str], list[str]]:
    """(absolute paths of the libraries and the loader `ldd` resolves for `path`, the sonames it
    cannot find on this host), in ldd's order."""
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    found, missing = [], []
    for raw in done.stdout.splitlines():
        line = raw.strip()
        if "=> not found" in line:
            missing.append(line.split()[0])
            continue
        target = line.split("=>", 1)[1] if "=>" in line else line
        lib = target.split("(")[0].strip()
        if lib.startswith("/"):
            found.append(lib)
    return found, missing


def outside_libraries(trees: list[Tree]) -> tuple[list[str], list[str]]:
    """(libraries the trees' ELF files need from outside the trees, sonames this host lacks)."""
    needed: set[str] = set()
    missing: set[str] = set()
    for tree in trees:
        for path in _walk(tree):
            kind, source = _entry(path, trees)
            if kind != "file" or not isinstance(source, Path) or not _is_elf(source):
                continue
            found, lacking = ldd(source)
            missing.update(lacking)
            needed.update(lib for lib in found
                          if not _inside(os.path.realpath(lib), trees) and not _inside(lib, trees))
    return sorted(needed), sorted(missing)


def disks_dir() -> Path:
    return cache_dir() / "runtime-disks"


def build_disk(trees: list[Tree], *, log: Callable[[str], None] = lambda _m: None) -> Disk:
    """The cached ext4 disk of `trees` (built once per content hash)."""
    trees = outermost(trees)
    for tree in trees:
        if not Path(tree.path).is_dir():
            raise InitramfsError(f"{tree.why or 'the plan'} names {tree.path}, which is not a directory "
                                 "on this host")
    digest, total = content_hash(trees)
    if total > MAX_TREE_BYTES:
        raise InitramfsError(f"the runtime trees hold {total / 2**30:.1f} GiB "
                             f"({', '.join(t.path for t in trees)})",
                             hint="carry a venv without unneeded packages, or a smaller classpath")
    home = disks_dir() / digest[:24]
    manifest_file = home / "manifest.json"
    if manifest_file.is_file() and (home / "disk.ext4").is_file():
        facts = json.loads(manifest_file.read_text())
        log(f"runtime disk {digest[:12]} cached ({total / 1e6:.0f} MB in {len(trees)} trees)")
        return Disk(home / "disk.ext4", trees, facts["libraries"], facts["missing"], facts["bytes"])
    mkfs = shutil.which("mkfs.ext4") or next((p for p in ("/sbin/mkfs.ext4", "/usr/sbin/mkfs.ext4")
                                              if Path(p).is_file()), None)
    if mkfs is None:
        raise MissingTool("mkfs.ext4 not found (it writes the lab guest's runtime disk)",
                          hint="apt-get install e2fsprogs")
    log(f"runtime disk {digest[:12]}: building ({total / 1e6:.0f} MB in {len(trees)} trees)")
    libraries, missing = outside_libraries(trees)
    disks_dir().mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=disks_dir(), prefix=".build-"))
    try:
        staging = scratch / "root"
        _stage(trees, staging)
        image = scratch / "disk.ext4"
        # Room for ext4's metadata (inodes, directories) over the files' own bytes.
        size_mb = int(total * 1.25 / 1e6) + 64
        done = subprocess.run([mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-L", "twruntime",
                               "-m", "0", "-d", str(staging), str(image), f"{size_mb}M"],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise InitramfsError(f"mkfs.ext4 -d failed: {done.stderr.strip()[-400:]}")
        shutil.rmtree(staging)
        facts = {"hash": digest, "trees": [t.path for t in trees], "libraries": libraries,
                 "missing": missing, "bytes": total, "disk_version": DISK_VERSION}
        (scratch / "manifest.json").write_text(json.dumps(facts, indent=2) + "\n")
        if home.exists():
            shutil.rmtree(home)
        scratch.rename(home)  # complete or absent: a half-built disk never looks cached
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Disk(home / "disk.ext4", trees, libraries, missing, total)


def _stage(trees: list[Tree], staging: Path) -> None:
    """Copy the trees into `staging` at their host paths (links that leave the trees dereferenced)."""
    for tree in trees:
        root = staging / tree.path.lstrip("/")
        root.mkdir(parents=True, exist_ok=True)
        for path in _walk(tree):
            kind, source = _entry(path, trees)
            dest = staging / str(path).lstrip("/")
            if kind == "dir":
                dest.mkdir(exist_ok=True)
                shutil.copystat(path, dest)
            elif kind == "link":
                os.symlink(str(source), dest)
            elif kind == "file":
                assert isinstance(source, Path)
                shutil.copy2(source, dest)
