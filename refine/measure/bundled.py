"""The bundled workloads: small C programs with named threads (ground truth).

They are compiled on first use into the cache, keyed by the hash of their
source, so an edited source is rebuilt and an unchanged one is reused. A Java
service is compiled the same way; a Python driver becomes an executable script
whose `#!` line names this interpreter.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from threadwise.errors import MissingTool, ThreadwiseError
from threadwise.paths import cache_dir

# rolesim's thread roles, by name pattern: the ground truth tests compare with.
ROLESIM_ROLES = {"hot-*": "compute", "feeder": "latency", "worker-*": "latency",
                 "housekeep": "housekeeping"}


def _source(filename: str) -> tuple[bytes, str]:
    """A bundled workload's source and its version (the hash its cached build is keyed by)."""
    source = resources.files("threadwise.refine").joinpath("workloads", filename).read_bytes()
    return source, hashlib.sha256(source).hexdigest()[:16]


def build(name: str = "rolesim") -> Path:
    """Compile workloads/<name>.c (once per source version) and return the binary."""
    source, digest = _source(f"{name}.c")
    # The binary keeps its plain name (the process comm, which profiles match
    # with PcommPrefix); the version lives in the directory.
    binary = cache_dir() / "workloads" / f"{name}-{digest}" / name
    if binary.exists():
        return binary
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise MissingTool("no C compiler to build the bundled workload", hint="apt-get install gcc")
    binary.parent.mkdir(parents=True, exist_ok=True)
    src = binary.with_suffix(".c")
    src.write_bytes(source)
    tmp = binary.with_name(binary.name + ".tmp")
    result = subprocess.run([compiler, "-O2", "-Wall", "-pthread", "-o", str(tmp), str(src)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ThreadwiseError(f"building {name} failed: {result.stderr.strip()}")
    tmp.rename(binary)
    return binary


# Java workloads: placeholder name -> the main class, whose source is workloads/<Class>.java.
JAVA_WORKLOADS = {"poolservice": "PoolService"}


def build_java(name: str) -> Path:
    """Compile workloads/<Class>.java (once per source version); return the classes directory
    (the service's classpath)."""
    main_class = JAVA_WORKLOADS[name]
    source, digest = _source(f"{main_class}.java")
    classes = cache_dir() / "workloads" / f"{name}-{digest}" / "classes"
    if (classes / f"{main_class}.class").is_file():
        return classes
    javac = shutil.which("javac")
    if javac is None:
        raise MissingTool(f"no javac to build the bundled {name} workload",
                          hint="apt-get install openjdk-17-jdk-headless (scripts/setup-system.sh)")
    staging = classes.with_name("classes.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    src = classes.parent / f"{main_class}.java"
    src.write_bytes(source)
    result = subprocess.run([javac, "-d", str(staging), str(src)], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise ThreadwiseError(f"building {name} failed: {result.stderr.strip()}")
    shutil.rmtree(classes, ignore_errors=True)
    staging.rename(classes)
    return classes


def _executable(path: Path, content: bytes) -> Path:
    """`content` as an executable file at `path` in the cache (written once, renamed into place)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(content)
    tmp.chmod(0o755)
    tmp.rename(path)
    return path


# Bundled POSIX shell scripts: placeholder name -> workloads/<file>. Copied into the cache (once
# per source version) with the executable bit, which a wheel's package data does not keep.
SCRIPT_WORKLOADS = {"fresh_mariadb": "fresh-mariadb.sh", "fresh_postgres": "fresh-postgres.sh"}


def script(name: str) -> Path:
    """workloads/<file> of a bundled script, as an executable in the cache."""
    filename = SCRIPT_WORKLOADS[name]
    source, digest = _source(filename)
    # The file keeps its name, so its process comm (`fresh-mariadb.s`) does not start with the
    # server's (`mariadbd`): a PcommPrefix target must not take the wrapper for the server.
    return _executable(cache_dir() / "workloads" / f"{name}-{digest}" / filename, source)


# Python drivers: placeholder name -> the script, workloads/<name>.py.
PYTHON_WORKLOADS = {"onnxload": "onnxload.py"}


def build_python(name: str) -> Path:
    """workloads/<name>.py as an executable `<cache>/workloads/<name>-<version>/<name>` whose `#!`
    line is this interpreter (sys.executable: the venv threadwise runs from, which holds the
    driver's packages), once per source and interpreter.

    Why a script and not `python FILE`: exec of a `#!` script names the process after the script
    (the kernel takes comm from the file executed), so its threads carry the workload's own name
    from the start; and the lab's packer follows a `#!` line to the interpreter and its venv
    (runtime/lab/carry.py)."""
    source, _ = _source(PYTHON_WORKLOADS[name])
    launcher = f"#!{sys.executable}\n".encode() + source
    digest = hashlib.sha256(launcher).hexdigest()[:16]
    return _executable(cache_dir() / "workloads" / f"{name}-{digest}" / name, launcher)
