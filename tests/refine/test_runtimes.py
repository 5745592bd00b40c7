"""The lab guest's runtime disk (runtime/lab/runtimes.py): which trees an interpreter needs, and the
ext4 image built from them, read back with e2fsprogs' debugfs (no mount, no root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from threadwise.errors import InitramfsError
from threadwise.runtime.lab import carry, runtimes
from threadwise.runtime.lab.runtimes import Tree, build_disk, interpreter_trees, outermost

DEBUGFS = shutil.which("debugfs") or next((p for p in ("/sbin/debugfs", "/usr/sbin/debugfs")
                                          if Path(p).is_file()), None)
needs_e2fsprogs = pytest.mark.skipif(DEBUGFS is None or (shutil.which("mkfs.ext4") is None
                                     and not Path("/sbin/mkfs.ext4").is_file()),
                                     reason="needs e2fsprogs (mkfs.ext4, debugfs): apt-get install e2fsprogs")


def debugfs(image: Path, request: str) -> str:
    assert DEBUGFS is not None
    return subprocess.run([DEBUGFS, "-R", request, str(image)], capture_output=True, text=True,
                          check=True).stdout


def test_a_python_interpreter_names_its_stdlib_without_its_tests_or_a_venvs_base_packages() -> None:
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    trees, real = interpreter_trees(base)
    stdlib = str(Path(os.__file__).parent)
    found = {tree.path: tree for tree in trees}
    assert stdlib in found, trees
    assert "test" in found[stdlib].skip
    assert real == base.resolve()
    # this test runs in the project's venv: its prefix is a tree, the base's site-packages are not
    venv_trees, _ = interpreter_trees(Path(sys.executable))
    assert any(tree.path == sys.prefix for tree in venv_trees) or sys.prefix == sys.base_prefix
    if sys.prefix != sys.base_prefix:
        assert "site-packages" in {t.path: t for t in venv_trees}[stdlib].skip


def test_trees_inside_another_are_dropped_and_the_host_itself_is_refused() -> None:
    kept = outermost([Tree("/opt/app/lib"), Tree("/opt/app"), Tree("/opt/other")])
    assert [tree.path for tree in kept] == ["/opt/app", "/opt/other"]
    with pytest.raises(InitramfsError, match="would carry most of this host"):
        outermost([Tree("/usr", why="a classpath")])


@needs_e2fsprogs
def test_the_disk_holds_the_trees_at_their_paths_and_is_rebuilt_only_when_content_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADWISE_CACHE", str(tmp_path / "cache"))
    app = tmp_path / "app"
    (app / "lib").mkdir(parents=True)
    (app / "lib" / "mod.py").write_text("X = 1\n")
    outside = tmp_path / "etc-conf"
    outside.write_text("setting=1\n")
    (app / "lib" / "conf").symlink_to(outside)            # leaves the tree: stored as the file
    (app / "lib" / "again").symlink_to("mod.py")          # inside: kept as a link
    (app / "lib" / "gone").symlink_to("/nonexistent/doc")  # dangling: kept as a link
    disk = build_disk([Tree(str(app))])
    assert disk.image.read_bytes()[1080:1082] == b"\x53\xef"   # the ext4 superblock's magic
    listing = debugfs(disk.image, f"ls -l {app}/lib")
    assert "mod.py" in listing and "conf" in listing
    assert debugfs(disk.image, f"cat {app}/lib/conf") == "setting=1\n"
    assert "Type: symlink" in debugfs(disk.image, f"stat {app}/lib/again")
    assert "Type: regular" in debugfs(disk.image, f"stat {app}/lib/conf")
    # unchanged content: the cached disk; changed content: a new one
    assert build_disk([Tree(str(app))]).image == disk.image
    (app / "lib" / "mod.py").write_text("X = 2\n")
    rebuilt = build_disk([Tree(str(app))])
    assert rebuilt.image != disk.image
    assert debugfs(rebuilt.image, f"cat {app}/lib/mod.py") == "X = 2\n"


def test_arguments_carry_files_and_directories_and_refuse_what_tmp_would_hide(tmp_path: Path) -> None:
    packer = carry.Packer(carry.Image(), frozenset({"sh"}))
    here = Path(os.__file__).resolve()   # the stdlib: outside /tmp, also when the checkout is not
    packer.argument(f"-Dconf={here}", why="service.command")
    packer.argument(f"{here.parent / 'json'}:{here.parent}", why="service.command")   # a classpath
    packer.argument("/dev/null", why="service.command")   # the guest mounts its own /dev
    assert packer.image.has(str(here))
    assert [tree.path for tree in runtimes.outermost(packer.trees)] == [str(here.parent)]
    hidden = tmp_path / "classes"
    hidden.mkdir()
    with pytest.raises(InitramfsError, match="under /tmp"):
        packer.argument(str(hidden), why="service.command")
