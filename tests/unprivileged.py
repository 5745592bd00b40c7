"""Run threadwise as an unprivileged user, wherever the checkout lives.

Problem: a test that checks what threadwise says to a user without root runs the CLI under
`setpriv` as uid 65534. In a clone under /root (mode 700, `make test` in root's home) that user
cannot reach the clone's .venv, its sources or the pyenv interpreter the venv points to, and
Python stopped with `No module named 'threadwise'` before threadwise said anything.
Approach: first ask that user's Python to import threadwise.cli. If it cannot, build a readable
copy once per session in a fresh directory under /tmp: hard links (no data copied, no 1 GB
venv duplicated) of the interpreter, its libpython and standard library, the venv's
site-packages and the project's packages laid out as `threadwise.*` (pyproject's
package-dir), then run that interpreter with PYTHONHOME, PYTHONPATH and LD_LIBRARY_PATH set
to the copy. Hard links cannot cross filesystems: then the tests skip and say exactly why.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from threadwise import givenclock

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
PROBE = "import threadwise.cli"
# what the copy leaves out: the standard library's own tests and site-packages (the venv's come
# instead), and the editable install's finder, whose paths are the unreadable checkout
STDLIB_SKIP = shutil.ignore_patterns("site-packages", "test", "idlelib")
SITE_SKIP = shutil.ignore_patterns("__editable__*")


def setpriv(uid: int = NOBODY) -> list[str]:
    """The argv prefix that runs a command as `uid` (its group too, no supplementary groups)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


@dataclass
class UserPython:
    """How to start this checkout's Python as an unprivileged user: argv prefix and environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    copy: Path | None = None   # the readable copy, removed by `remove`

    def command(self, *args: str) -> list[str]:
        """`python -m threadwise.cli ARGS` as the user."""
        return [*self.argv, "-m", "threadwise.cli", *args]

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return {**(os.environ if base is None else base), **self.env}

    def remove(self) -> None:
        if self.copy is not None:
            shutil.rmtree(self.copy, ignore_errors=True)


class CannotCopy(Exception):
    """No readable copy can be made here (the message says why)."""


def user_python(uid: int = NOBODY) -> UserPython:
    """This checkout's Python for `uid`: as it is when that user can import threadwise, else a copy."""
    plain = UserPython([*setpriv(uid), sys.executable])
    if _imports(plain):
        return plain
    copy = Path(tempfile.mkdtemp(prefix="threadwise-unprivileged-", dir="/tmp"))
    try:
        copied = _readable_copy(copy, uid)
    except OSError as error:
        shutil.rmtree(copy, ignore_errors=True)
        raise CannotCopy(
            f"uid {uid} cannot import threadwise from {ROOT} (a parent directory such as /root is "
            f"not searchable for it) and no readable hard-linked copy could be made in /tmp: "
            f"{error}") from error
    if not _imports(copied):
        copied.remove()
        raise CannotCopy(f"uid {uid} cannot import threadwise from {ROOT}, nor from a readable copy "
                         f"of it in /tmp")
    return copied


def _imports(python: UserPython) -> bool:
    done = givenclock.run([*python.argv, "-c", PROBE], env=python.environ(), capture_output=True,
                          timeout=120, check=False)
    return done.returncode == 0


def _readable_copy(copy: Path, uid: int) -> UserPython:
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (copy / "bin").mkdir(parents=True)
    os.link(Path(sys.executable).resolve(), copy / "bin" / version)
    (copy / "lib").mkdir()
    for lib in sorted((base / "lib").glob("libpython*.so*")):   # none for a static interpreter
        os.link(lib.resolve(), copy / "lib" / lib.name)
    _link_tree(Path(sysconfig.get_path("stdlib")), copy / "lib" / version, STDLIB_SKIP)
    for site in sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}):
        _link_tree(Path(site), copy / "site", SITE_SKIP)
    for package, folder in _package_dirs().items():
        _link_tree(ROOT / folder, copy / "src" / package.replace(".", "/"))
    _open_to_others(copy)
    env = {"PYTHONHOME": str(copy), "PYTHONPATH": f"{copy / 'src'}:{copy / 'site'}",
           "LD_LIBRARY_PATH": str(copy / "lib"), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return UserPython([*setpriv(uid), str(copy / "bin" / version)], env, copy)


def _package_dirs() -> dict[str, str]:
    """pyproject's package-dir: import name -> folder of the checkout (threadwise.observe -> observe)."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        mapping = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    # parents first: threadwise/ is linked before threadwise/observe/ goes inside it
    return dict(sorted(mapping.items(), key=lambda item: item[0].count(".")))


def _link_tree(source: Path, target: Path, ignore: Callable[..., set[str]] | None = None) -> None:
    shutil.copytree(source, target, copy_function=os.link, ignore=ignore, dirs_exist_ok=True,
                    ignore_dangling_symlinks=True)


def _open_to_others(copy: Path) -> None:
    """Directories searchable and readable by everyone (the linked files keep their own modes)."""
    for folder, _dirs, _files in os.walk(copy):
        os.chmod(folder, 0o755)
