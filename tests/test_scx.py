"""threadwise.scx, the one module that runs scx_layered: its flags, launch line and --version
(a stand-in binary: no build, no sched_ext)."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadwise.errors import MissingTool
from threadwise.scx import interval_args, launch_argv, scx_layered_version


def test_the_interval_flag_is_in_seconds() -> None:
    assert interval_args(5000) == ("--interval", "5")
    assert interval_args(250) == ("--interval", "0.25")


def test_the_launch_line_keeps_the_match_map_and_puts_the_config_last(tmp_path: Path) -> None:
    binary = tmp_path / "scx_layered"
    assert launch_argv(tmp_path / "c.json", ("--interval", "1"), binary) == [
        str(binary), "--enable-match-debug", "--interval", "1", f"f:{tmp_path / 'c.json'}"]


def test_the_version_is_read_from_the_binary(tmp_path: Path) -> None:
    fake = tmp_path / "scx_layered"
    fake.write_text("#!/bin/sh\necho 'scx_layered 1.1.4 x86_64-unknown-linux-gnu'\n")
    fake.chmod(0o755)
    assert scx_layered_version(fake) == "1.1.4 x86_64-unknown-linux-gnu"
    with pytest.raises(MissingTool, match="cannot run"):
        scx_layered_version(tmp_path / "absent")
