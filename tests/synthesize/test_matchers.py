"""The matcher set data must be what the pinned scx_layered crate says (src/config.rs & co).

A version bump that adds, removes or changes a matcher, a layer kind, an option
or a limit makes one of these fail, naming what changed.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest

from threadwise.synthesize.matchers import SCX_LAYERED_VERSION, matcher_set


def _enum_body(source: str, header: str) -> str:
    start = source.index(header)
    body_start = source.index("{", start) + 1
    depth, pos = 1, body_start
    while depth:
        depth += {"{": 1, "}": -1}.get(source[pos], 0)
        pos += 1
    return source[body_start : pos - 1]


def _strip(body: str) -> str:
    body = re.sub(r"//[^\n]*", "", body)
    return re.sub(r"#\[[^\]]*\]", "", body)


def _fields(body: str) -> dict[str, str]:
    """`name: Type,` pairs at depth 0 of a struct or variant body."""
    out = {}
    for line in _strip(body).splitlines():
        found = re.match(r"\s*(?:pub\s+)?(\w+):\s*(.+?),?\s*$", line)
        if found:
            out[found.group(1)] = found.group(2).rstrip(",")
    return out


def _variants(body: str) -> list[str]:
    return re.findall(r"^\s*(\w+)\s*(?:[,({]|$)", _strip(body), flags=re.M)


def test_data_names_the_pinned_version() -> None:
    assert matcher_set().version == SCX_LAYERED_VERSION


@pytest.mark.scx
def test_layer_match_variants_and_arguments(crate_src: Path) -> None:
    body = _strip(_enum_body((crate_src / "src/config.rs").read_text(), "pub enum LayerMatch"))
    crate = {name: tuple(a.strip() for a in args.split(","))
             for name, args in re.findall(r"(\w+)\(([^)]*)\)", body)}
    assert crate == matcher_set().matchers


@pytest.mark.scx
def test_layer_kinds_and_their_fields(crate_src: Path) -> None:
    body = _enum_body((crate_src / "src/config.rs").read_text(), "pub enum LayerKind")
    kinds = {}
    for name in ("Confined", "Grouped", "Open"):
        kinds[name] = {k: v for k, v in _fields(_enum_body(body, name)).items() if k != "common"}
    assert kinds == matcher_set().layer_kinds


@pytest.mark.scx
def test_layer_common_options(crate_src: Path) -> None:
    body = _enum_body((crate_src / "src/config.rs").read_text(), "pub struct LayerCommon")
    assert _fields(body) == matcher_set().common_options


@pytest.mark.scx
def test_growth_algos_and_placements(crate_src: Path) -> None:
    growth = _enum_body((crate_src / "src/layer_core_growth.rs").read_text(),
                        "pub enum LayerGrowthAlgo")
    assert tuple(_variants(growth)) == matcher_set().growth_algos
    placement = _enum_body((crate_src / "src/config.rs").read_text(), "pub enum LayerPlacement")
    assert tuple(_variants(placement)) == matcher_set().placements


@pytest.mark.scx
def test_limits_from_intf_h(crate_src: Path) -> None:
    intf = (crate_src / "src/bpf/intf.h").read_text()
    consts = {k: int(v) for k, v in re.findall(r"^\s*(MAX_\w+|MIN_\w+|DEFAULT_\w+)\s*=\s*(\d+),",
                                                intf, flags=re.M)}
    kinds = _enum_body(intf, "enum layer_match_kind")
    nr_kinds = len(re.findall(r"^\s*MATCH_\w+", kinds, flags=re.M))
    limits = matcher_set().limits
    assert limits.max_layers == consts["MAX_LAYERS"]
    assert limits.max_layer_match_ors == consts["MAX_LAYER_MATCH_ORS"]
    assert limits.max_match_ands == nr_kinds
    # The kernel's comm and scx_layered's comm_prefix are char[16] with the NUL.
    assert limits.max_comm_bytes == consts["MAX_COMM"] - 1
    assert limits.max_path == consts["MAX_PATH"]
    assert limits.max_layer_name == consts["MAX_LAYER_NAME"]
    assert limits.min_layer_weight == consts["MIN_LAYER_WEIGHT"]
    assert limits.max_layer_weight == consts["MAX_LAYER_WEIGHT"]
    assert limits.default_layer_weight == consts["DEFAULT_LAYER_WEIGHT"]


@pytest.mark.scx
def test_limits_from_main_rs(crate_src: Path) -> None:
    main = (crate_src / "src/main.rs").read_text()
    verify = _enum_body(main, "fn verify_layer_specs")
    raw = json.loads((resources.files("threadwise.synthesize") / "data"
                      / f"scx_layered-{SCX_LAYERED_VERSION}.json").read_text())
    # A new check in verify_layer_specs changes this count: mirror it in rules.py, then here.
    assert verify.count("bail!") == raw["verify_layer_specs_bails"]
    assert "prefix.len() > MAX_COMM" in verify
    assert "*hint > 1024" in verify and matcher_set().limits.max_hint == 1024
    assert "util_range.0 >= util_range.1" in verify
    assert "cpus_min > cpus_max" in verify
    slice_default = re.search(r'default_value = "(\d+)"\)\]\s*slice_us: u64', main)
    assert slice_default and int(slice_default.group(1)) == matcher_set().limits.default_slice_us
