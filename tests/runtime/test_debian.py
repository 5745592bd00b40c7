"""Choosing the lab kernel from a Packages index (pure, fast tier)."""

from __future__ import annotations

import pytest

from threadwise.errors import InputError
from threadwise.runtime.lab.debian import choose_kernel, compare_versions, parse_packages


def stanza(name: str, version: str, sha: str = "ab" * 32) -> str:
    return (
        f"Package: {name}\nSource: linux\nVersion: {version}\nArchitecture: amd64\n"
        f"Description: a kernel\n continuation line\n"
        f"Filename: pool/main/l/linux/{name}_{version}_amd64.deb\nSize: 1234\nSHA256: {sha.upper()}\n"
    )


def index(*stanzas: str) -> str:
    return "\n".join(stanzas)


def kernel_set(release: str, version: str) -> list[str]:
    return [
        stanza(f"linux-binary-{release}", version),
        stanza(f"linux-base-{release}", version),
        stanza(f"linux-modules-{release}", version),
    ]


@pytest.mark.parametrize(
    ("left", "right", "sign"),
    [
        ("7.3.4-1~bpo13+1", "7.2.12-1~bpo13+1", 1),
        ("7.0.4-1", "6.19.14-1", 1),
        ("7.2.9-1", "7.2.12-1", -1),
        ("1.0~rc1-1", "1.0-1", -1),
        ("1:0.1-1", "9.9-1", 1),
        ("1.0-1", "1.0-1", 0),
        ("1.0a-1", "1.0-1", 1),
        ("1.0+b1", "1.0", 1),
    ],
)
def test_compare_versions_like_dpkg(left, right, sign):
    result = compare_versions(left, right)
    assert (result > 0) - (result < 0) == sign


def test_parse_keeps_fields_and_skips_incomplete_stanzas():
    text = index(stanza("linux-base-x", "1.0-1"), "Package: broken\nVersion: 1\n")
    (package,) = parse_packages(text)
    assert package.name == "linux-base-x"
    assert package.size == 1234
    assert package.sha256 == "ab" * 32  # normalised to lower case


def test_choose_newest_complete_set():
    text = index(
        *kernel_set("7.2.12+deb13-cloud-amd64", "7.2.12-1~bpo13+1"),
        *kernel_set("7.3.4+deb13-cloud-amd64", "7.3.4-1~bpo13+1"),
        *kernel_set("6.19.14+deb13-cloud-amd64", "6.19.14-1~bpo13+1"),
        stanza("linux-binary-unsigned-7.9.0+deb13-cloud-amd64", "7.9.0-1"),
        stanza("linux-binary-7.9.0+deb13-amd64", "7.9.0-1"),  # other flavour
        stanza("linux-binary-7.8.0+deb13-cloud-amd64", "7.8.0-1"),  # no base/modules
    )
    choice = choose_kernel(parse_packages(text))
    assert choice.release == "7.3.4+deb13-cloud-amd64"
    assert choice.base.name == "linux-base-7.3.4+deb13-cloud-amd64"
    assert choice.modules.name == "linux-modules-7.3.4+deb13-cloud-amd64"


def test_no_candidate_is_an_input_error_with_hint():
    with pytest.raises(InputError) as caught:
        choose_kernel(parse_packages(stanza("linux-binary-7.0+deb13-cloud-amd64", "7.0-1")))
    assert caught.value.hint
