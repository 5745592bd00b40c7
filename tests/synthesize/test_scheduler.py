"""The profile's `[scheduler]` table (scx_layered's command-line flags, not layer options):
written and read back, range-checked with file and line, turned into flags over the preset,
carried by `compile`, passed to the oracle (a fake binary records them; the real one parses
them), and shown by `diff`."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.datafiles import line_of, profile_diagnostics
from threadwise import givenclock
from threadwise.errors import ConfigRefused
from threadwise.shape import parse_shape, synthetic
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.diff import diff_profiles
from threadwise.synthesize.diff_render import render_markdown, render_text
from threadwise.synthesize.presets import SCHEDULER_INTERVAL_MS, scheduler_args
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import check_file, validate
from threadwise.synthesize.schema import Group, Profile, Scheduler, Workload
from threadwise.synthesize.writer import dumps

SHAPE = synthetic(4, 2)


def profile(interval_ms: int | None = None, *, table: bool = True) -> Profile:
    return Profile(schema_version=1, name="t", workload=Workload(process="svc"), group=[
        Group(name="hot", match=["hot-"], treatment="exclusive", hot_threads=1),
        Group(name="io", match=["io_"], treatment="latency"),
    ], scheduler=Scheduler(interval_ms=interval_ms) if table else None)




# --- the table in TOML ----------------------------------------------------------------------------


def test_written_last_with_what_it_sets_and_read_back_byte_identical() -> None:
    text = dumps(profile(1000))
    assert text.endswith(
        "[scheduler]\n# scx_layered's own process (command-line flags, not layer options).\n"
        "# its userspace step every 1000 ms (scx_layered's default: 100 ms; the step runs ahead of "
        "every layer)\ninterval_ms = 1000\n")
    again, source = parse_profile(text, "p.toml")
    assert again == profile(1000) and dumps(again) == text
    assert source.line_of(("scheduler", "interval_ms")) == line_of(text, "interval_ms = 1000")
    assert validate(again) == []


def test_no_table_writes_none_and_an_empty_table_round_trips() -> None:
    plain = dumps(profile(table=False))
    assert "[scheduler]" not in plain and parse_profile(plain)[0].scheduler is None
    empty = dumps(profile(None))
    assert "[scheduler]" in empty and "interval_ms" not in empty
    assert parse_profile(empty)[0] == profile(None)


@pytest.mark.parametrize(("old", "new", "message"), [
    ("interval_ms = 1000", "interval_ms = 9",
     "scheduler.interval_ms: input should be greater than or equal to 10, got 9"),
    ("interval_ms = 1000", "interval_ms = 10001",
     "scheduler.interval_ms: input should be less than or equal to 10000, got 10001"),
    ("interval_ms = 1000", "interval_ms = 1000.0",
     "scheduler.interval_ms: input should be a valid integer, got 1000.0"),
    ("interval_ms = 1000", 'interval_ms = "1s"',
     "scheduler.interval_ms: input should be a valid integer, got '1s'"),
])
def test_interval_range_and_type_errors_name_file_and_line(old: str, new: str, message: str) -> None:
    text = dumps(profile(1000)).replace(old, new)
    [diag] = profile_diagnostics(text)
    assert (diag.rule, diag.message, diag.file) == ("schema", message, "p.toml")
    assert diag.line == line_of(text, new)
    assert diag.render().startswith(f"p.toml:{diag.line}: error[schema]: {message}")


def test_the_range_bounds_are_accepted() -> None:
    for value in (10, 10_000):
        text = dumps(profile(1000)).replace("interval_ms = 1000", f"interval_ms = {value}")
        assert parse_profile(text)[0].scheduler == Scheduler(interval_ms=value)


def test_an_unknown_scheduler_key_names_its_line_and_the_allowed_key(tmp_path: Path) -> None:
    text = dumps(profile(1000)).replace("interval_ms = 1000", "interval = 1000")
    path = tmp_path / "p.toml"
    path.write_text(text)
    found, [diag] = check_file(path)
    assert found is None
    assert diag.message == "unknown key 'scheduler.interval'"
    assert (diag.file, diag.line) == (str(path), line_of(text, "interval = 1000"))
    assert "did you mean 'interval_ms'?" in (diag.hint or "")


# --- flags ----------------------------------------------------------------------------------------


def test_scheduler_args_are_the_preset_or_the_table_in_seconds() -> None:
    assert SCHEDULER_INTERVAL_MS == 5000
    assert scheduler_args(profile(table=False)) == ("--interval", "5")
    assert scheduler_args(profile(None)) == ("--interval", "5")     # an empty table: the preset
    assert scheduler_args(profile(1000)) == ("--interval", "1")
    assert scheduler_args(profile(250)) == ("--interval", "0.25")
    assert scheduler_args(profile(10)) == ("--interval", "0.01")
    assert scheduler_args(profile(10_000)) == ("--interval", "10")


def test_compiled_carries_the_flags_and_the_layers_do_not_change() -> None:
    default = compile_profile(profile(table=False), SHAPE)
    assert default.scx_args == ("--interval", "5")
    tuned = compile_profile(profile(1000), SHAPE)
    assert tuned.scx_args == ("--interval", "1")
    assert tuned.config == default.config      # command-line flags, not layer options
    assert "interval" not in default.to_json()


def _recording_binary(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in scx_layered that records its argv and prints back the config it was given."""
    argv = tmp_path / "argv"
    fake = tmp_path / "scx_layered"
    fake.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > '{argv}'\n"
        "for a in \"$@\"; do case \"$a\" in f:*) printf 'specs='; cat \"${a#f:}\";; esac; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake, argv


def test_the_oracle_passes_the_flags_before_print_and_exit(tmp_path: Path) -> None:
    fake, argv = _recording_binary(tmp_path)
    compiled = compile_profile(profile(1000), SHAPE)
    assert oracle.check(compiled.config, fake, args=compiled.scx_args) == []
    assert argv.read_text().splitlines()[:3] == ["--interval", "1", "--print-and-exit"]
    assert oracle.check(compiled.config, fake) == []
    assert argv.read_text().splitlines()[0] == "--print-and-exit"


def test_compile_check_passes_the_profiles_flags_to_the_oracle(tmp_path: Path) -> None:
    fake, argv = _recording_binary(tmp_path)
    (tmp_path / "p.toml").write_text(dumps(profile(250)))
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "compile", "p.toml", "--shape",
                           "cores=4,threads-per-core=2", "--check"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "THREADWISE_SCX_LAYERED": str(fake)})
    assert done.returncode == 0, done.stderr
    assert argv.read_text().splitlines()[:3] == ["--interval", "0.25", "--print-and-exit"]
    assert "scx_layered flags ([scheduler]): --interval 0.25" in done.stderr
    assert [s["name"] for s in json.loads(done.stdout)] == ["hot", "io", "rest"]


@pytest.mark.scx
def test_the_real_scx_layered_parses_the_flags_and_refuses_a_bad_value(scx_binary: Path) -> None:
    """--print-and-exit runs clap over the flags: every interval the schema allows parses, a value
    it cannot read refuses the call (nothing would attach)."""
    config = compile_profile(profile(table=False), SHAPE).config
    for interval_ms in (10, SCHEDULER_INTERVAL_MS, 10_000):
        args = compile_profile(profile(interval_ms), SHAPE).scx_args
        assert oracle.check(config, scx_binary, args=args) == [], args
    with pytest.raises(ConfigRefused, match=r"invalid value 'abc' for '--interval <INTERVAL>'"):
        oracle.print_and_exit(config, scx_binary, args=("--interval", "abc"))
    with pytest.raises(ConfigRefused, match=r"unexpected argument '--intervall'"):
        oracle.print_and_exit(config, scx_binary, args=("--intervall", "5"))


# --- diff -----------------------------------------------------------------------------------------


def test_diff_shows_a_scheduler_change_and_the_flags_it_compiles_to(tmp_path: Path) -> None:
    before, after = tmp_path / "a.toml", tmp_path / "b.toml"
    before.write_text(dumps(profile(table=False)))
    after.write_text(dumps(profile(1000)))
    result = diff_profiles(before, after, shape=parse_shape("cores=4,threads-per-core=2"))
    assert not result.empty
    text = render_text(result)
    # unset: the preset's value, marked so
    assert "changes:\n  [scheduler]: interval_ms: 5000 (preset) -> 1000\n" in text, text
    assert "  scx_layered: flags: --interval 5 -> --interval 1\n" in text, text
    assert "| `[scheduler]` | `interval_ms` | `5000` (preset) | `1000` |" in render_markdown(result)
    assert "| scx_layered | `flags` | `--interval 5` | `--interval 1` |" in render_markdown(result)
    # without a shape: the table's change only
    assert "flags" not in render_text(diff_profiles(before, after))
    # the preset written out changes the table, not the flags scx_layered is started with
    same = tmp_path / "c.toml"
    same.write_text(dumps(profile(SCHEDULER_INTERVAL_MS)))
    written = render_text(diff_profiles(before, same, shape=parse_shape("cores=4")))
    assert "[scheduler]: interval_ms: 5000 (preset) -> 5000" in written and "flags" not in written
    assert diff_profiles(after, after, shape=parse_shape("cores=4")).empty
