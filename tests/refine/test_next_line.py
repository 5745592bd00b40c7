"""train's closing "next:" line suggests what works on the host it ran on (issue 21): `apply`
only where the kernel has sched_ext, the lab VM and a ladder elsewhere."""

from __future__ import annotations

from pathlib import Path

from threadwise.refine.cli import next_line
from threadwise.refine.measure.workload import bundled_workload_path
from threadwise.runtime.scx import sched_ext_state

PROFILE, REPORT = Path("profiles/rolesim.toml"), Path("artifacts/rolesim/REPORT.md")


def test_with_sched_ext_it_suggests_apply():
    line = next_line(PROFILE, REPORT, bundled_workload_path("rolesim"), sched_ext=True)
    assert line.endswith(f"apply it with: threadwise apply {PROFILE}")
    assert "lab" not in line


def test_without_sched_ext_it_suggests_the_lab_and_a_ladder_never_a_bare_apply():
    line = next_line(PROFILE, REPORT, bundled_workload_path("rolesim"), sched_ext=False)
    assert f"threadwise lab run -- threadwise apply {PROFILE} --duration 30" in line
    assert f"threadwise ladder rolesim --arm {PROFILE} --lab" in line   # a bundled name, not its path
    assert "apply it with" not in line


def test_a_workload_file_is_named_by_its_path(tmp_path):
    own = tmp_path / "rolesim.toml"   # a user's file that shares a bundled name stays a path
    own.write_text(bundled_workload_path("rolesim").read_text())
    assert f"threadwise ladder {own} --arm" in next_line(PROFILE, REPORT, own, sched_ext=False)


def test_by_default_it_reads_this_host():
    line = next_line(PROFILE, REPORT, bundled_workload_path("rolesim"))
    assert ("threadwise lab run" not in line) == sched_ext_state().supported
