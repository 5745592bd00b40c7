"""What the self-contained lab guest carries: the image, and every program plan.sh runs.

Problem: the initramfs guest (initramfs.py) shares no filesystem with the host,
so every program the ladder's plan names (the workload's service, readiness
probe and load generator, the spinner, scx_layered, the tracer) must be inside
its image, at the path plan.sh names it by, with what it needs to run; and
whatever it cannot carry must be refused before anything runs, by name and
with what to do, not found missing inside the guest minutes later.

Approach: `Packer` resolves each command word (a busybox applet, else a
program on the host's PATH, else an absolute path) and adds the executable at
its host path with the shared libraries `ldd` lists; a script's `#!`
interpreter follows it. A JVM or a CPython/PyPy interpreter (and a venv's)
needs its whole tree: the packer links the program to its real path and notes
the trees, which go on the guest's read-only runtime disk (runtimes.py); Node
is a single program. Other interpreters that need a library tree (Perl, Ruby,
...) are refused. Paths among a command's arguments go along: files into the
image, directories (a classpath, an app's folder) onto the runtime disk.
`carry_command` is one workload command of plan.sh (its program and every host
program among its arguments), and refuses a program under a directory the
guest's init mounts over (/tmp is a fresh tmpfs there: a program under it
would vanish). `pack` (initramfs.py) and `threadwise workload check`
(refine/measure/preflight.py) both go through it, so the check says exactly what packing
would. `Image` is the newc cpio the packer fills (written here, no cpio tool).
"""

from __future__ import annotations

import gzip
import os
import re
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from threadwise.errors import InitramfsError, MissingTool
from threadwise.paths import find_program
from threadwise.runtime.lab.runtimes import Tree, argument_tree, interpreter_trees, is_runtime, ldd

# The guest's PATH before EXTRA_PATH (guest/init sets the same).
GUEST_PATH = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
PLAN_FUNCTIONS = ("service_cmd", "load_cmd", "ready_cmd", "prepare_cmd")
PLAN_VARIABLES = ("SPIN", "SCX", "TRACER", "LAYER_OF")  # TRACER: the libbpf tracer of trace cells
# (refine/measure/blockers.py); LAYER_OF: the membership probe's reader of scx_layered's task state
# Interpreters whose programs need a library tree the runtime disk does not know how to find
# (Java and Python are carried with their trees, runtimes.py; Node is one ELF program).
UNPACKABLE = re.compile(r"^(perl|ruby|php|lua|Rscript|tclsh|wish)")
# Programs that read a data tree of their own from a fixed path compiled into them, which no
# argument names and ldd does not list: sysbench finds its Lua tests (oltp_read_write requires
# oltp_common) in /usr/share/sysbench (its binary holds `/usr/share/sysbench/?.lua`). Each tree
# goes on the runtime disk like a directory an argument names (runtimes.argument_tree).
DATA_TREES: dict[str, tuple[str, ...]] = {"sysbench": ("/usr/share/sysbench",)}
# Host directories that merged-/usr systems make symlinks; the image mirrors them.
MERGED_TOPS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Where guest/init mounts a fresh file system over the image: whatever the image holds there is
# hidden in the guest (`mount -t tmpfs tmp /tmp`, proc, sysfs, devtmpfs).
HIDDEN = {"/tmp": "tmpfs", "/proc": "proc", "/sys": "sysfs", "/dev": "devtmpfs"}
# What a user does about an interpreter the image cannot carry.
INTERPRETER_HINT = ("the default lab guest (initramfs) carries programs with their shared libraries, "
                    "and the trees of Java, CPython/PyPy (and venvs) on its runtime disk, but not this "
                    "interpreter's library tree: give the workload a compiled program, a POSIX shell "
                    "script (#!/bin/sh), a JVM or Python service, or measure with --guest vng (the lab "
                    "VM on this machine's own root filesystem, where interpreters run; docs/lab.md)")


@dataclass
class _Entry:
    kind: str  # "dir" | "file" | "link" | "chr"
    source: Path | bytes | str | None = None  # file: host path or bytes; link: target
    mode: int = 0o755
    rdev: tuple[int, int] = (0, 0)


@dataclass
class Image:
    """Guest path -> entry; paths under merged-/usr tops are stored where the symlinks lead."""

    entries: dict[str, _Entry] = field(default_factory=dict)
    tops: dict[str, str] = field(default_factory=dict)  # "lib" -> "usr/lib"

    def __post_init__(self) -> None:
        for top in MERGED_TOPS:
            host = Path("/") / top
            if host.is_symlink():
                target = os.readlink(host).lstrip("/")
                self.tops[top] = target
                self.entries[top] = _Entry("link", target)
                self.mkdir("/" + target)

    def canonical(self, path: str) -> str:
        parts = PurePosixPath(path).parts[1:]
        if not parts:
            raise InitramfsError(f"not a path inside the image: {path!r}")
        if parts[0] in self.tops:
            parts = (*PurePosixPath(self.tops[parts[0]]).parts, *parts[1:])
        return "/".join(parts)

    def mkdir(self, path: str) -> None:
        key = self.canonical(path)
        parts = key.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub not in self.entries:
                self.entries[sub] = _Entry("dir", mode=0o755)

    def _parent(self, key: str) -> None:
        if "/" in key:
            self.mkdir("/" + key.rsplit("/", 1)[0])

    def add_file(self, path: str, source: Path | bytes, mode: int = 0o644) -> None:
        key = self.canonical(path)
        self._parent(key)
        self.entries[key] = _Entry("file", source, mode)

    def add_link(self, path: str, target: str, *, replace: bool = False) -> None:
        key = self.canonical(path)
        if key in self.entries and not replace:
            return  # a packed file wins over a busybox applet of the same name
        self._parent(key)
        self.entries[key] = _Entry("link", target)

    def add_char(self, path: str, major: int, minor: int) -> None:
        key = self.canonical(path)
        self._parent(key)
        self.entries[key] = _Entry("chr", mode=0o600, rdev=(major, minor))

    def has(self, path: str) -> bool:
        return self.canonical(path) in self.entries

    def write(self, dest: Path) -> int:
        """The gzipped newc cpio; returns its size."""
        with dest.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
            for ino, key in enumerate(sorted(self.entries, key=lambda k: (k.count("/"), k)), start=1):
                entry = self.entries[key]
                data = b""
                if entry.kind == "dir":
                    mode = stat.S_IFDIR | entry.mode
                elif entry.kind == "link":
                    mode, data = stat.S_IFLNK | 0o777, str(entry.source).encode()
                elif entry.kind == "chr":
                    mode = stat.S_IFCHR | entry.mode
                else:
                    source = entry.source
                    data = source if isinstance(source, bytes) else Path(str(source)).read_bytes()
                    mode = stat.S_IFREG | entry.mode
                _cpio_entry(gz, key, mode, data, ino=ino, rdev=entry.rdev)
            _cpio_entry(gz, "TRAILER!!!", 0, b"", ino=0, nlink=1)
        return dest.stat().st_size


def _cpio_entry(sink: gzip.GzipFile, name: str, mode: int, data: bytes, *, ino: int,
                rdev: tuple[int, int] = (0, 0), nlink: int | None = None) -> None:
    encoded = name.encode() + b"\0"
    links = nlink if nlink is not None else (2 if stat.S_ISDIR(mode) else 1)
    fields = (ino, mode, 0, 0, links, 0, len(data), 0, 0, rdev[0], rdev[1], len(encoded), 0)
    header = b"070701" + b"".join(f"{value:08X}".encode() for value in fields)
    sink.write(header + encoded + b"\0" * (-(len(header) + len(encoded)) % 4))
    sink.write(data + b"\0" * (-len(data) % 4))



# --- what plan.sh runs ---------------------------------------------------------------------------


def plan_commands(plan_text: str) -> dict[str, list[str]]:
    """The argv of each workload function and the words of SPIN/SCX/TRACER/LAYER_OF, as plan.sh
    spells them."""
    found: dict[str, list[str]] = {}
    for line in plan_text.splitlines():
        for name in PLAN_FUNCTIONS:
            prefix = f"{name}() {{ "
            if line.startswith(prefix) and line.endswith("; }"):
                found[name] = shlex.split(line[len(prefix):-3])
        for name in PLAN_VARIABLES:
            if line.startswith(f"{name}="):
                found[name] = shlex.split(line[len(name) + 1:])
        if line.startswith("ATTACH_MODE="):
            found["ATTACH_MODE"] = shlex.split(line[len("ATTACH_MODE="):])
    return found


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def program_argv(words: list[str]) -> list[str]:
    """The program and its arguments behind the shell's own prefixes (`exec`, `VAR=x`, `env VAR=x`)."""
    rest = list(words)
    while rest and (rest[0] in ("exec", "command", "env") or ASSIGNMENT.match(rest[0])):
        rest.pop(0)
    return rest


def _elf_interpreter(path: Path) -> tuple[bool, str | None]:
    """(is an ELF file, its PT_INTERP or None when static)."""
    with path.open("rb") as handle:
        head = handle.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # ELF64 only: the guest is x86-64
            return False, None
        phoff = int.from_bytes(head[0x20:0x28], "little")
        phentsize = int.from_bytes(head[0x36:0x38], "little")
        phnum = int.from_bytes(head[0x38:0x3A], "little")
        for i in range(phnum):
            handle.seek(phoff + i * phentsize)
            header = handle.read(phentsize)
            if int.from_bytes(header[0:4], "little") == 3:  # PT_INTERP
                offset = int.from_bytes(header[8:16], "little")
                size = int.from_bytes(header[32:40], "little")
                handle.seek(offset)
                return True, handle.read(size).rstrip(b"\0").decode()
    return True, None


def shared_libraries(path: Path) -> list[str]:
    """Absolute paths of the libraries (and the loader) `ldd` resolves for `path`; a library this
    host lacks is an error (the program could not start in the guest either)."""
    found, missing = ldd(path)
    if missing:
        raise InitramfsError(f"{path} needs {missing[0]}, which this host lacks (ldd)")
    return found


@dataclass
class Packer:
    """Adds executables at their host paths, with what they need to run."""

    image: Image
    applets: frozenset[str]
    extra_path: list[str] = field(default_factory=list)
    packed: list[str] = field(default_factory=list)  # host paths, for the report
    trees: list[Tree] = field(default_factory=list)  # for the runtime disk (runtimes.py)

    def command(self, word: str, *, why: str) -> None:
        """argv[0] of a plan command: a busybox applet, or an executable packed at its path."""
        if word == "busybox" or (("/" not in word) and word in self.applets):
            return
        if "/" not in word:
            found = shutil.which(word)
            if found is None:
                raise InitramfsError(f"{why} runs {word!r}, which is neither on this host's PATH "
                                     "nor a busybox applet")
            directory = str(Path(found).parent)
            if directory not in GUEST_PATH and directory not in self.extra_path:
                self.extra_path.append(directory)
            word = found
        elif not word.startswith("/"):
            raise InitramfsError(f"{why} runs {word!r}, a relative path: the guest's directory differs",
                                 hint="give the workload's commands absolute paths or bare names")
        self.executable(Path(word), why=why)

    def libraries(self, real: Path) -> None:
        """The shared libraries and loader of a dynamic ELF program, at their host paths."""
        if _elf_interpreter(real)[1] is not None:
            self.add_libraries(shared_libraries(real))

    def add_libraries(self, libs: list[str]) -> None:
        """Libraries at their host paths (the first one packed at a path wins)."""
        for lib in libs:
            if not self.image.has(lib):
                self.image.add_file(lib, Path(lib).resolve(), 0o755)

    def runtime(self, path: Path, *, why: str) -> None:
        """A JVM or Python interpreter: its trees for the disk, and `path` linked to the real
        program (a JVM finds its home, and CPython its prefix, from where the binary really is)."""
        self.packed.append(str(path))
        trees, real = interpreter_trees(path)  # a pyenv shim's real program is the interpreter's
        self.trees.extend(trees)
        if str(real) != str(path):
            self.image.add_link(str(path), str(real), replace=True)
        if not any(str(real).startswith(t.path.rstrip("/") + "/") for t in trees):
            is_elf, _ = _elf_interpreter(real)
            if not is_elf:
                raise InitramfsError(f"{why} runs {path} ({real}), which is not an ELF program")
            self.image.add_file(str(real), real, stat.S_IMODE(real.stat().st_mode) | 0o555)
            self.libraries(real)
        # a venv's bin/python is a link out of the venv: the real binary is packed above, and
        # the venv's own link is kept on the disk

    def argument(self, word: str, *, why: str) -> None:
        """Host paths among a command's arguments (`-cp /a:/b`, `-Dx=/y`, a script): files into the
        image, directories onto the runtime disk; a path the guest would hide is refused."""
        for piece in word.replace("=", ":").split(":"):
            if not piece.startswith("/") or not os.path.lexists(piece) or piece in HIDDEN:
                continue
            if hidden_under(piece) in ("/proc", "/sys", "/dev"):
                continue  # the guest mounts its own: /dev/null is there
            problem = hidden_problem(piece, why=why)
            if problem is not None:
                raise problem
            target = Path(piece)
            if target.is_dir():
                tree = argument_tree(piece)
                if tree is not None:
                    self.trees.append(tree)
            elif target.is_file() and os.access(piece, os.X_OK):
                self.executable(target, why=why)
            elif target.is_file() and not self.image.has(piece):
                self.image.add_file(piece, target.resolve(), stat.S_IMODE(target.stat().st_mode))

    def executable(self, path: Path, *, why: str) -> None:
        if str(path) in self.packed:
            return
        if not path.is_file():
            raise InitramfsError(f"{why} names {path}, which does not exist on this host")
        real = path.resolve()
        for name in (path.name, real.name):
            if UNPACKABLE.match(name):
                raise InitramfsError(
                    f"{why} runs {path} (a {name} interpreter): a self-contained guest cannot carry "
                    "its library tree",
                    hint=INTERPRETER_HINT)
        if is_runtime(path.name) or is_runtime(real.name):
            self.runtime(path, why=why)
            return
        is_elf, interp = _elf_interpreter(real)
        self.packed.append(str(path))
        for data in DATA_TREES.get(real.name, ()):
            tree = argument_tree(data)
            if tree is not None:
                self.trees.append(Tree(tree.path, why=f"{real.name}'s data"))
        if is_elf:
            mode = stat.S_IMODE(real.stat().st_mode) | 0o555
            self.image.add_file(str(path), real, mode)
            if interp is not None:
                self.libraries(real)
            return
        head = real.read_bytes()[:256]
        if not head.startswith(b"#!"):
            raise InitramfsError(f"{why} names {path}, which is neither an ELF program nor a script")
        words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
        if not words:
            raise InitramfsError(f"{path}: empty #! line")
        self.image.add_file(str(path), real, stat.S_IMODE(real.stat().st_mode) | 0o555)
        interpreter = words[0]
        if interpreter in ("/bin/sh", "/usr/bin/sh"):
            return  # busybox sh
        if interpreter in ("/usr/bin/env", "/bin/env") and len(words) > 1:
            self.image.add_link(interpreter, "/bin/busybox", replace=True)
            self.command(words[1], why=f"{path}'s #! line")
            return
        self.executable(Path(interpreter), why=f"{path}'s #! line")


def find_busybox() -> Path:
    found = shutil.which("busybox") or next(
        (p for p in ("/bin/busybox", "/usr/bin/busybox") if Path(p).is_file()), None)
    if found is None:
        raise MissingTool("busybox not found (the guest's shell and tools)",
                          hint="apt-get install busybox-static (scripts/setup-system.sh)")
    return Path(found)


def _bpftool() -> Path:
    found = find_program("bpftool")
    if found is None:
        raise MissingTool("bpftool not found (the agent reads scx_layered's tid -> layer map with it)",
                          hint="apt-get install bpftool")
    return Path(found)


def busybox_applets(busybox: Path) -> frozenset[str]:
    done = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=False)
    names = frozenset(done.stdout.split())
    if done.returncode != 0 or "sh" not in names:
        raise MissingTool(f"{busybox} --list failed or has no sh applet",
                          hint="apt-get install busybox-static")
    return names


def hidden_under(path: str) -> str | None:
    """The guest mount point that hides `path` inside the guest, or None."""
    return next((top for top in HIDDEN if path == top or path.startswith(top + "/")), None)


def hidden_problem(path: str, *, why: str) -> InitramfsError | None:
    """The refusal of a host path the guest would hide, or None."""
    top = hidden_under(path)
    if top is None:
        return None
    return InitramfsError(
        f"{why} names {path}, under {top}: the lab guest's init mounts a fresh {HIDDEN[top]} on {top}, "
        f"so it would not be found there",
        hint=f"move it out of {top} (e.g. to /opt/NAME/ or ~/bin/) and name that path in the workload file")


def carry_command(packer: Packer, words: list[str], *, why: str) -> None:
    """One workload command of plan.sh (`service_cmd`, `load_cmd`, `ready_cmd`, `prepare_cmd`): its
    program and every host program among its arguments (taskset, env, nice wrappers), refused when
    the guest cannot carry it or would hide it."""
    argv = program_argv(words)
    if not argv:
        raise InitramfsError(f"{why} runs no program")
    before = len(packer.packed)
    packer.command(argv[0], why=why)
    # Host paths among the arguments (and in the `VAR=/path` words before the program) must be
    # there too: programs, scripts, a classpath, an app's folder.
    for word in [*words[:len(words) - len(argv)], *argv[1:]]:
        packer.argument(word, why=why)
    for path in packer.packed[before:]:
        problem = hidden_problem(path, why=why)
        if problem is not None:
            raise problem
