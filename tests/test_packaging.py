"""pyproject.toml keeps set-up quiet and ships every data file (issue 21).

setuptools printed about 250 lines of warnings on a first `make setup`: that `project.license`
as a table is deprecated, and, for each folder it sees as a package that `packages` does not
list, that the configuration is ambiguous. Such a folder's files are also left out of a wheel
(observe/sql was). So: the license is an SPDX string, and every folder of the stage packages that
holds tracked files is a listed package whose package-data takes each of its non-Python files.
"""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = CONFIG["tool"]["setuptools"]


def _tracked() -> list[PurePosixPath]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [PurePosixPath(name) for name in listed.decode().split("\0") if name]


def _packages_of_files() -> dict[str, list[PurePosixPath]]:
    """dotted package -> the tracked files directly in its folder, for every mapped folder."""
    found: dict[str, list[PurePosixPath]] = {}
    for package, folder in SETUPTOOLS["package-dir"].items():
        for path in _tracked():
            if path.parts[:1] == (folder,) and (ROOT / path).is_file():
                dotted = ".".join([package, *path.parent.parts[1:]])
                found.setdefault(dotted, []).append(path)
    return found


def test_the_license_is_an_spdx_string():
    assert isinstance(CONFIG["project"]["license"], str)
    assert any(req.startswith("setuptools>=77") for req in CONFIG["build-system"]["requires"])


def test_every_folder_with_files_is_a_listed_package():
    folders = _packages_of_files()
    assert set(folders) <= set(SETUPTOOLS["packages"]), "add these to [tool.setuptools] packages"
    assert set(SETUPTOOLS["packages"]) <= set(folders), "listed packages without a folder of files"


def test_package_data_takes_every_data_file():
    package_data = SETUPTOOLS.get("package-data", {})
    missing = [str(path) for package, files in _packages_of_files().items() for path in files
               if path.suffix != ".py"
               and not any(fnmatch.fnmatch(path.name, glob) for glob in package_data.get(package, []))]
    assert not missing, f"not in any package-data glob (a wheel would leave them out): {missing}"


def test_setup_compiles_the_bytecode_of_every_package_folder():
    """setup-python.sh writes threadwise's bytecode (the lab guest cannot): all of its folders."""
    script = (ROOT / "scripts" / "setup-python.sh").read_text()
    line = next(line for line in script.splitlines() if line.startswith("compile_bytecode()"))
    compiled = set(line.split("compileall -q -j0 ")[1].split(" >")[0].split())
    assert compiled == set(SETUPTOOLS["package-dir"].values())
