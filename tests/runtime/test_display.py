"""`status` never shows a count it does not explain: scx_layered's tasks next to the workload's threads."""

from __future__ import annotations

from threadwise.runtime import display
from threadwise.runtime.stats import LayerFigures


def _row(tid: int, comm: str, expected: str, actual: str | None) -> dict:
    return {"tid": tid, "pid": 1, "comm": comm, "process": "redis-server", "expected": expected,
            "actual": actual, "ok": expected == actual}


def test_layer_counts_come_with_their_meaning() -> None:
    layers = [LayerFigures("bio", 0, 0, 0.0, [], False), LayerFigures("rest", 1, 19, 5.3, [], False)]
    found = {"threads": [_row(11, "bio_close_file", "bio", None), _row(12, "bio_aof", "bio", None),
                         _row(13, "bio_lazy_free", "bio", "bio"), _row(10, "redis-server", "rest", "rest")],
             "error": None}
    lines = display.layer_table(layers, found)
    assert lines[0].split() == ["layer", "tasks", "workload", "util%", "cpus"]
    assert lines[1].split()[:3] == ["bio", "0", "1"] and lines[2].split()[:3] == ["rest", "19", "1"]
    notes = "\n".join(line for line in lines if line.startswith("note:"))
    assert "tasks: scx_layered's own count" in notes and "becomes runnable after the attach" in notes
    assert "workload: this profile's threads" in notes
    table = display.membership(found)
    assert "bio_close_file (11) in no layer (not matched since the attach)" in table
    # with the re-match's run counts: one that ran since is a fault, one still parked is not
    found["threads"][0]["ran"] = True
    found["threads"][1].update(ran=False, ok=True)
    table = display.membership(found)
    assert "bio_close_file (11) in no layer, though it has run since the re-match" in table
    assert "bio_aof" not in table


def test_without_membership_the_tasks_note_still_shows() -> None:
    lines = display.layer_table([LayerFigures("hot", 0, 2, 196.9, [0, 1], True)], None)
    assert lines[0].split() == ["layer", "tasks", "util%", "cpus"]
    assert lines[-2].startswith("note:      tasks: scx_layered's own count")
    assert lines[-1].startswith("note:      util%: scx_layered's own figure")   # no map: said so
    measured = LayerFigures("hot", 0, 2, 99.6, [0], True, util_source="threads")
    assert display.layer_table([measured], None)[-1].startswith(
        "note:      util%: the CPU time of the layer's threads")


def test_apply_says_when_layers_that_own_cpus_get_them() -> None:
    """scx_layered sizes Confined and Grouped layers only at its first step, an --interval after the
    attach (docs/lab.md): apply says so for them, and says nothing for a config of Open layers."""
    from pathlib import Path

    from threadwise.runtime.config import ResolvedConfig
    from threadwise.shape import parse_shape
    from threadwise.synthesize.compile import compile_profile
    from threadwise.synthesize.reader import parse_profile

    golden = Path(__file__).parents[1] / "synthesize" / "fixtures" / "golden" / "rolesim-capture.toml"
    profile, _ = parse_profile(golden.read_text())
    config = compile_profile(profile, parse_shape("cores=2,threads-per-core=1")).config
    resolved = ResolvedConfig(config=config, source="rolesim.toml", kind="profile", shape="cores=2",
                              scx_args=("--interval", "5"))
    assert display.first_step(resolved) == (
        "sized:    hot get their CPUs at scx_layered's first step, 5 s after the attach (--interval); "
        "until then their threads run on any CPU")
    open_only = ResolvedConfig(config=type(config)(config.specs[1:]), source="x.json", kind="json",
                               shape=None)
    assert display.first_step(open_only) is None


def test_status_says_why_a_canarys_profile_was_stopped() -> None:
    from threadwise.runtime.exitinfo import ExitKind, ExitReport
    from threadwise.runtime.launcher import StatusReport
    from threadwise.runtime.scx import SchedExtState
    from threadwise.runtime.state import Phase, RunState

    why = "the process that held the profile on trial (pid 42) ended without a decision"
    state = RunState(Phase.STOPPED, source="p.toml", state_after="disabled", stop_reason=why,
                     exit=ExitReport(ExitKind.UNREG, "unregistered from user space", 0, True))
    text = display.status(StatusReport(SchedExtState(True, "disabled", ""), state))
    assert f"stopped:   {why}" in text.splitlines()
