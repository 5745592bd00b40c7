"""Reading a Debian archive's Packages index and choosing a lab kernel from it.

Problem: the lab needs a kernel with sched_ext, and bookworm/trixie kernels
have none; trixie-backports ships several 7.x kernels at once. Adding that
suite to apt sources would pull a newer libc into the machine (LAB.md), so we
read the suite's `Packages.xz` over HTTP instead.

Approach: parse the index into stanzas (RFC 822-style paragraphs), keep the
`linux-binary-<release>` packages of the wanted flavour (not `-unsigned`, not
`-dbg`), pair each with `linux-base-<release>` (which carries the config)
and `linux-modules-<release>` (overlayfs is a module there), and take the
set with the highest Debian version. Version comparison follows dpkg's
algorithm (epoch, upstream, revision; `~` sorts before everything), so
`7.3.4-1~bpo13+1` beats `7.2.12-1~bpo13+1` and `6.19.14` loses to `7.0.4`.
Everything here is pure: network and files live in `kernel.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from threadwise.errors import InputError

ARCHIVE = "http://deb.debian.org/debian"
SUITE = "trixie-backports"
FLAVOUR = "cloud-amd64"


@dataclass(frozen=True)
class DebPackage:
    """One stanza of a Packages index (the fields we use)."""

    name: str
    version: str
    filename: str
    size: int
    sha256: str


@dataclass(frozen=True)
class KernelChoice:
    """A kernel image package, the base package holding its config, and its modules."""

    release: str  # e.g. 7.3.4+deb13-cloud-amd64 (what `uname -r` prints)
    binary: DebPackage
    base: DebPackage
    modules: DebPackage

    @property
    def packages(self) -> tuple[DebPackage, DebPackage, DebPackage]:
        return (self.binary, self.base, self.modules)


def index_url(archive: str = ARCHIVE, suite: str = SUITE) -> str:
    return f"{archive}/dists/{suite}/main/binary-amd64/Packages.xz"


def parse_packages(text: str) -> list[DebPackage]:
    """Parse a (decompressed) Packages index; stanzas lacking a field are skipped."""
    packages = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if not line or line[0] in " \t":
                continue  # continuation lines (descriptions) are not needed
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        try:
            packages.append(
                DebPackage(
                    name=fields["Package"],
                    version=fields["Version"],
                    filename=fields["Filename"],
                    size=int(fields["Size"]),
                    sha256=fields["SHA256"].lower(),
                )
            )
        except (KeyError, ValueError):
            continue
    return packages


def choose_kernel(packages: list[DebPackage], flavour: str = FLAVOUR) -> KernelChoice:
    """The newest linux-binary-<release> of `flavour` that has its linux-base-<release>."""
    binary_re = re.compile(rf"^linux-binary-(\d[^ ]*-{re.escape(flavour)})$")
    by_name: dict[str, DebPackage] = {}
    for package in packages:
        known = by_name.get(package.name)
        if known is None or compare_versions(package.version, known.version) > 0:
            by_name[package.name] = package
    candidates = []
    for name, package in by_name.items():
        match = binary_re.match(name)
        if not match:
            continue
        release = match.group(1)
        base = by_name.get(f"linux-base-{release}")
        modules = by_name.get(f"linux-modules-{release}")
        if base and modules and base.version == modules.version == package.version:
            candidates.append(KernelChoice(release=release, binary=package, base=base, modules=modules))
    if not candidates:
        raise InputError(
            f"no linux-binary-*-{flavour} with matching linux-base-*/linux-modules-* in the index",
            hint=f"check {index_url()} by hand; the archive layout may have changed",
        )
    best = candidates[0]
    for candidate in candidates[1:]:
        if compare_versions(candidate.binary.version, best.binary.version) > 0:
            best = candidate
    return best


# --- dpkg version comparison -------------------------------------------------


def _order(char: str) -> int:
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left: str, right: str) -> int:
    """dpkg's verrevcmp: alternate non-digit and digit runs."""
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            lo = _order(left[i]) if i < len(left) else 0
            ro = _order(right[j]) if j < len(right) else 0
            if lo != ro:
                return lo - ro
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and left[i].isdigit() and j < len(right) and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch or 0), upstream, revision


def compare_versions(left: str, right: str) -> int:
    """<0, 0, >0 like `dpkg --compare-versions`."""
    le, lu, lr = _split(left)
    re_, ru, rr = _split(right)
    if le != re_:
        return le - re_
    return _compare_part(lu, ru) or _compare_part(lr, rr)
