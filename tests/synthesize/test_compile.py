"""Compile to scx_layered JSON: layer shapes, the demotion rule, and the real oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from threadwise.errors import UsageError
from threadwise.shape import host_shape, parse_shape, synthetic
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.schema import Group, Profile, Workload


def hot_profile(hot_threads: int, **extra: object) -> Profile:
    return Profile(schema_version=1, name="t", workload=Workload(process="svc"), group=[
        Group(name="hot", match=["hot-*"], treatment="exclusive", hot_threads=hot_threads,
              **extra),
        Group(name="io", match=["io_"], exclude=["io_x"], treatment="latency"),
    ])


def test_exclusive_becomes_confined_whole_cores_with_siblings() -> None:
    compiled = compile_profile(hot_profile(2), synthetic(4, 2))
    hot, io, rest = compiled.config.to_json_data()
    assert hot["kind"] == {"Confined": {
        "util_range": [0.8, 0.9], "cpus_range": [4, 4], "exclusive": True, "protected": True,
        "preempt": False, "slice_us": 2000, "weight": 100}}   # the preset: no preempt, 2 ms slices
    assert hot["matches"] == [[{"PcommPrefix": "svc"}, {"CommPrefix": "hot-"}]]
    assert io["matches"] == [[{"PcommPrefix": "svc"}, {"CommPrefix": "io_"},
                              {"CommPrefixExclude": "io_x"}]]
    assert io["kind"]["Open"]["preempt"] is True
    assert rest == {"name": "rest", "comment": "threadwise t: everything else (catch-all)",
                    "matches": [[]], "kind": {"Open": {"slice_us": 2000, "weight": 100}}}
    assert compiled.notes == []
    # the old preset, written as overrides, compiles to what the preset used to give
    old_config = compile_profile(hot_profile(2, preempt=True, slice_us=20000), synthetic(4, 2)).config
    old = old_config.to_json_data()[0]
    assert old["kind"] == {"Confined": {
        "util_range": [0.8, 0.9], "cpus_range": [4, 4], "exclusive": True, "protected": True,
        "preempt": True, "slice_us": 20000, "weight": 100}}


def test_demotion_on_a_two_core_shape_with_three_hot_threads() -> None:
    compiled = compile_profile(hot_profile(3), synthetic(2, 1))
    hot = compiled.config.to_json_data()[0]
    assert list(hot["kind"]) == ["Grouped"]
    assert "exclusive" not in hot["kind"]["Grouped"]
    reason = "needs 3 whole cores, the shape has 1 left (2 cores - 1 reserved)"
    assert hot["comment"] == f"threadwise t/hot: exclusive, demoted to Grouped: {reason}"
    assert compiled.notes == [
        f"group 'hot' demoted from exclusive (Confined) to Grouped: {reason}"]
    assert compiled.plans[0].demoted


def test_exclusive_groups_take_cores_in_profile_order() -> None:
    p = Profile(schema_version=1, name="t", workload=Workload(process="svc"), group=[
        Group(name="a", match=["a"], treatment="exclusive", hot_threads=2),
        Group(name="b", match=["b"], treatment="exclusive", hot_threads=2),
    ])
    compiled = compile_profile(p, synthetic(4, 2))
    assert [next(iter(s["kind"])) for s in compiled.config.to_json_data()[:2]] == ["Confined", "Grouped"]
    assert "has 1 left (4 cores - 1 reserved - earlier exclusive groups)" in compiled.notes[0]


def test_request_sizing_and_overrides() -> None:
    p = hot_profile(2, request_millicores=2250, cpu_fraction=0.85, slice_us=5000, weight=300)
    kind = compile_profile(p, synthetic(8, 2)).config.to_json_data()[0]["kind"]["Confined"]
    assert (kind["cpus_range"], kind["slice_us"], kind["weight"]) == ([4, 4], 5000, 300)


def test_shapes() -> None:
    assert parse_shape("cores=4,threads-per-core=2,reserve=0").as_dict()["siblings"] == [
        [0, 1], [2, 3], [4, 5], [6, 7]]
    assert parse_shape("cores=3").threads_per_core == 1
    host = host_shape()
    assert host.nr_cpus >= 1 and host.source == "host"
    with pytest.raises(UsageError, match="bad shape item"):
        parse_shape("cores=4,smt=2")
    with pytest.raises(UsageError, match="file not found"):
        parse_shape("no-such-file.json")
    with pytest.raises(UsageError, match="unknown shape"):
        parse_shape("big")


def test_shape_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("siblings = [[0, 4], [1, 5]]\nreserve_cores = 0\n")
    shape = parse_shape(str(path))
    assert (shape.cores, shape.threads_per_core, shape.exclusive_budget) == (2, 2, 2)
    assert shape.spec == str(path)   # not numbered core by core: the file says it


def test_a_shape_is_written_as_the_spec_that_parses_back_to_it() -> None:
    """What a record stores and a printed command line shows (`run.shape`, `synthesize --shape`)."""
    for spec in ("cores=2,threads-per-core=1", "cores=4,threads-per-core=2,reserve=0", "host"):
        assert parse_shape(spec).spec == spec and parse_shape(parse_shape(spec).spec) == parse_shape(spec)
    assert parse_shape("cores=3,tpc=2,reserve=1").spec == "cores=3,threads-per-core=2"


@pytest.mark.scx
def test_oracle_accepts_the_example_with_every_option(example: Profile, scx_binary: Path) -> None:
    for shape in (synthetic(8, 2), synthetic(2, 1), synthetic(1, 2), host_shape()):
        config = compile_profile(example, shape).config
        back = oracle.print_and_exit(config, scx_binary)
        assert oracle.mismatches(config, back) == []


@pytest.mark.scx
def test_oracle_catches_a_changed_option(scx_binary: Path) -> None:
    """An option scx_layered changes is a mismatch (one it does not know cannot even be typed:
    the reader refuses it, test_hand_written_configs_are_checked_as_scx_layered_would)."""
    from threadwise.synthesize.layered import LayerConfig

    config = LayerConfig.from_json_data([
        {"name": "a", "comment": "c", "matches": [[{"CommPrefix": "a"}]], "kind": {"Open": {"weight": 0}}},
        {"name": "rest", "comment": "r", "matches": [[]], "kind": {"Open": {}}}])
    assert oracle.check(config, scx_binary) == ["a.Open.weight: sent 0, got 100"]


@pytest.mark.scx
def test_the_runner_reports_a_rejected_config(scx_binary: Path) -> None:
    """JSON the typed reader would refuse (an unknown matcher) is refused by scx_layered too."""
    from threadwise.scx import print_and_exit

    specs = [{"name": "a", "matches": [[{"CommPrefx": "a"}]], "kind": {"Open": {}}}]
    with pytest.raises(Exception, match="scx_layered rejected the config"):
        print_and_exit(specs, scx_binary)


def test_compile_produces_the_typed_config_and_its_json_reads_back(example: Profile) -> None:
    from threadwise.synthesize.layered import KindName, LayerConfig, LayerMatch

    compiled = compile_profile(example, synthetic(8, 2))
    config = compiled.config
    assert isinstance(config, LayerConfig) and config.layer_names()[-1] == "rest"
    worker = config.specs[0]
    assert worker.kind.name is KindName.CONFINED and worker.kind.exclusive and worker.kind.fixed_cpus == 4
    assert worker.matches[0][:2] == (LayerMatch("PcommPrefix", "demo-server"),
                                     LayerMatch("CommPrefix", "worker-"))
    assert config.specs[-1].is_catch_all
    assert LayerConfig.from_json_data(json.loads(compiled.to_json())) == config
    assert config.to_json_data() == json.loads(compiled.to_json())


def test_hand_written_configs_are_checked_as_scx_layered_would() -> None:
    from threadwise.errors import InputError
    from threadwise.synthesize.layered import LayerConfig

    def layer(**options: object) -> list[dict]:
        return [{"name": "a", "matches": [[{"CommPrefix": "a"}]], "kind": {"Open": options}},
                {"name": "rest", "matches": [[]], "kind": {"Open": {}}}]

    with pytest.raises(InputError, match=r"layer 'a': scx_layered 1\.1\.4 has no Open option exlusive"):
        LayerConfig.from_json_data(layer(exlusive=True))
    with pytest.raises(InputError, match="option weight = '100' is not a non-negative integer"):
        LayerConfig.from_json_data(layer(weight="100"))
    with pytest.raises(InputError, match="has no Open option cpus_range"):   # Confined/Grouped only
        LayerConfig.from_json_data(layer(cpus_range=[1, 1]))
    kept = LayerConfig.from_json_data(layer(growth_algo="Sticky", weight=50))
    assert kept.specs[0].kind.options.weight == 50
    assert kept.to_json_data()[0]["kind"] == {"Open": {"weight": 50, "growth_algo": "Sticky"}}
    assert kept.specs[0].kind.options["growth_algo"] == "Sticky"


@pytest.mark.scx
def test_a_refusal_is_config_refused_from_the_oracle(scx_binary: Path) -> None:
    from threadwise.errors import ConfigRefused
    from threadwise.synthesize.layered import LayerConfig

    config = LayerConfig.from_json_data([
        {"name": "a", "matches": [[{"CommPrefix": "a"}]], "kind": {"Confined": {"cpus_range": [1, 1]}}},
        {"name": "rest", "matches": [[]], "kind": {"Open": {}}}])   # Confined needs util_range
    with pytest.raises(ConfigRefused, match="scx_layered rejected the config") as refused:
        oracle.check(config, scx_binary)
    assert refused.value.exit_code == 8
