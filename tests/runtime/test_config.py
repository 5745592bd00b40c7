"""What `apply` resolves: a typed config, checked by the real scx_layered's parser exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import datafiles
from threadwise.errors import ConfigRefused, InputError
from threadwise.runtime.config import resolve, write_config
from threadwise.scx import scx_layered_path
from threadwise.shape import parse_shape
from threadwise.synthesize.example import example_profile
from threadwise.synthesize.writer import dumps

GOOD = [{"name": "hot", "comment": "the spinner", "matches": [[{"CommPrefix": "tw-hot"}]],
         "kind": {"Confined": {"util_range": [0.5, 0.9], "cpus_range": [1, 1]}}},
        {"name": "rest", "matches": [[]], "kind": {"Open": {}}}]


@pytest.fixture
def counted(tmp_path, monkeypatch) -> Path:
    """The real scx_layered behind a wrapper that counts its runs (one line per run)."""
    real = scx_layered_path()
    runs = tmp_path / "runs"
    wrapper = tmp_path / "scx_layered"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{runs}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("THREADWISE_SCX_LAYERED", str(wrapper))
    return runs


def _runs(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


@pytest.mark.scx
def test_a_profile_is_compiled_and_checked_once(tmp_path, counted):
    profile = tmp_path / "p.toml"
    profile.write_text(dumps(example_profile()))
    resolved = resolve(profile, parse_shape("cores=4,threads-per-core=2"))
    assert _runs(counted) == 1
    assert resolved.kind == "profile" and resolved.config.layer_names()[-1] == "rest"
    written = write_config(resolved, tmp_path / "config.json")
    assert json.loads(written.read_text()) == resolved.config.to_json_data()


@pytest.mark.scx
def test_a_json_config_is_typed_and_checked_once(tmp_path, counted):
    config = tmp_path / "layered.json"
    config.write_text(json.dumps(GOOD))
    resolved = resolve(config)
    assert _runs(counted) == 1
    assert resolved.config.specs[0].kind.fixed_cpus == 1 and resolved.layer_names() == ["hot", "rest"]


@pytest.mark.scx
def test_refusals_are_config_refused(tmp_path, counted):
    config = tmp_path / "layered.json"
    no_util = json.loads(json.dumps(GOOD))
    del no_util[0]["kind"]["Confined"]["util_range"]   # serde: missing field
    config.write_text(json.dumps(no_util))
    with pytest.raises(ConfigRefused, match="scx_layered rejected the config") as refused:
        resolve(config)
    assert refused.value.exit_code == 8 and _runs(counted) == 1


def test_unknown_options_are_refused_before_scx_layered_runs(tmp_path):
    config = tmp_path / "layered.json"
    bad = json.loads(json.dumps(GOOD))
    bad[0]["kind"]["Confined"]["exlusive"] = True
    config.write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"layer 'hot': .* has no Confined option exlusive"):
        resolve(config)


@pytest.fixture
def recorded(tmp_path, monkeypatch) -> Path:
    """A stand-in scx_layered that records its argv and prints back the config it was given."""
    argv = tmp_path / "argv"
    fake = tmp_path / "fake-scx_layered"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{argv}'\n"
                    "for a in \"$@\"; do case \"$a\" in f:*) printf 'specs='; cat \"${a#f:}\";; esac; done\n")
    fake.chmod(0o755)
    monkeypatch.setenv("THREADWISE_SCX_LAYERED", str(fake))
    return argv


def test_a_profile_resolves_with_its_scheduler_flags_checked_by_the_parser(tmp_path, recorded):
    from threadwise.synthesize.schema import Scheduler

    plain = tmp_path / "plain.toml"
    plain.write_text(dumps(example_profile()))
    assert resolve(plain, parse_shape("cores=4,threads-per-core=2")).scx_args == ("--interval", "5")  # preset
    assert recorded.read_text().splitlines()[:3] == ["--interval", "5", "--print-and-exit"]
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(dumps(example_profile().model_copy(update={"scheduler": Scheduler(interval_ms=1000)})))
    resolved = resolve(tuned, parse_shape("cores=4,threads-per-core=2"))
    assert resolved.scx_args == ("--interval", "1")
    assert recorded.read_text().splitlines()[:3] == ["--interval", "1", "--print-and-exit"]


def test_a_json_config_has_no_flags(tmp_path, recorded):
    config = tmp_path / "layered.json"
    config.write_text(json.dumps(GOOD))
    assert resolve(config).scx_args == ()   # scx_layered's own defaults: a JSON has no [scheduler]
    assert recorded.read_text().splitlines()[0] == "--print-and-exit"


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_apply_reads_and_validates_its_input_once(tmp_path, recorded, monkeypatch, suffix):
    """prepare loads PROFILE/CONFIG once (before looking at the host) and passes the typed result
    down: no later step reads or validates the file again."""
    from threadwise.runtime import launcher
    from threadwise.runtime.state import RunFiles
    from threadwise.synthesize import api
    from threadwise.synthesize.layered import LayerConfig

    path = tmp_path / f"input{suffix}"
    path.write_text(dumps(example_profile()) if suffix == ".toml" else json.dumps(GOOD))
    reads: list[str] = []
    real_valid, real_load = api.load_valid, LayerConfig.load.__func__
    monkeypatch.setattr(api, "load_valid", lambda p: reads.append("profile") or real_valid(p))
    monkeypatch.setattr(LayerConfig, "load", classmethod(lambda cls, p: reads.append("json")
                                                         or real_load(cls, p)))
    monkeypatch.setattr(launcher, "_preflight", lambda files: reads.append("preflight"))
    files = RunFiles(tmp_path / "run")
    resolved = launcher.prepare(path, parse_shape("cores=4,threads-per-core=2"), files)
    assert reads == ["profile" if suffix == ".toml" else "json", "preflight"]
    assert json.loads(files.config.read_text()) == resolved.config.to_json_data()


def test_bad_input_is_refused_before_the_host_is_looked_at(tmp_path, monkeypatch):
    from threadwise.runtime import launcher
    from threadwise.runtime.state import RunFiles

    bad = tmp_path / "bad.toml"
    bad.write_text("schema_version = 1\nname = 'x'\n")
    monkeypatch.setattr(launcher, "_preflight", lambda files: pytest.fail("looked at the host first"))
    with pytest.raises(InputError):
        launcher.prepare(bad, None, RunFiles(tmp_path / "run"))


def test_scx_args_go_with_a_json_config_and_are_refused_for_a_profile(tmp_path: Path) -> None:
    """A ladder arm's flags (arms/ARM.args) reach scx_layered's own parse with its .json config;
    a profile brings its own in [scheduler], so `--scx-arg` with one is a usage error."""
    from threadwise.errors import UsageError
    from threadwise.runtime.config import check_scx_args, load_input

    profile = datafiles.OLD_ROLESIM_PROFILE
    with pytest.raises(UsageError, match=r"--scx-arg is for a \.json layer config"):
        check_scx_args(load_input(profile), ("--interval", "5"))
    check_scx_args(load_input(profile), ())
