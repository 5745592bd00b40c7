"""train fails early on options no training can succeed with, and loudly when nothing valid was measured."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.datafiles import OLD_REDIS_LADDER
from tests.refine.train_options import train_options
from threadwise import givenclock
from threadwise.errors import NothingMeasured, UsageError
from threadwise.refine.measure import store, summary
from threadwise.refine.measure.run import Where
from threadwise.refine.measure.workload import bundled_workload_path
from threadwise.refine.search.step_ladders import require_pairs
from threadwise.refine.train import TrainOptions, check_options, train

REDIS_RECORD = OLD_REDIS_LADDER   # Redis's record of 2026-11-26 (tests/datafiles.py)


def options(tmp_path: Path, **changes: object) -> TrainOptions:
    return train_options(tmp_path, "never", **changes)


@pytest.mark.parametrize(("change", "says"), [
    ({"repeats": 1}, "--repeats 1"), ({"repeats": 0}, "--repeats 0"), ({"levels": []}, "--levels"),
    ({"budget": -1}, "--budget -1"), ({"window_s": 0.0}, "--window 0"),
])
def test_bad_options_are_refused_before_anything_runs_or_is_erased(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    last = tmp_path / "build" / "train" / "never"
    last.mkdir(parents=True)
    (last / "ladder.duckdb").write_text("the last training's data")
    with pytest.raises(UsageError, match=says):
        train(options(tmp_path, **change), progress=lambda line: None)
    assert (last / "ladder.duckdb").read_text() == "the last training's data"
    check_options(options(tmp_path))   # the defaults pass


def test_invalid_cells_are_summarised_per_kind_once_per_cell() -> None:
    con = store.open_ladder(REDIS_RECORD, read_only=True)
    try:
        assert summary.invalid_summary(con, 2) == "every cell valid"
        line = summary.invalid_summary(con, 3)
        reasons = con.execute("SELECT reasons FROM cell WHERE run_id = 3 AND NOT valid").fetchall()
    finally:
        con.close()
    # the committed Redis record (2026-11-26): one profile cell whose spinners never ran
    assert len(reasons) == 1 and reasons[0][0].startswith("spinners: ")
    assert line == f"1 of 60 cells invalid: spinners in 1 (e.g. {reasons[0][0]})"


def test_a_start_profile_without_pairs_fails_the_training_and_says_why(tmp_path: Path) -> None:
    ladder_file = tmp_path / "ladder.duckdb"
    shutil.copy(REDIS_RECORD, ladder_file)
    require_pairs(tmp_path, ladder_file, 2, "get_rps")   # 5 pairs at bg=0: enough
    con = store.open_ladder(ladder_file)
    con.execute("UPDATE comparison SET pairs = 1 WHERE run_id = 2")
    con.close()
    with pytest.raises(NothingMeasured, match="1 valid pairs") as failed:
        require_pairs(tmp_path, ladder_file, 2, "get_rps")
    assert failed.value.exit_code == 11 and "no profile was written" in (failed.value.hint or "")
    text = (tmp_path / "FAILED.md").read_text()
    assert text.startswith("# Training failed: the start profile has 1 valid pairs")
    assert "Run 2: every cell valid." in text and "- run 2 cell " not in text


def test_the_trained_profile_names_its_capture_relative_to_its_own_folder() -> None:
    from threadwise.refine.train import _capture_relative_to
    from threadwise.synthesize.reader import load_profile

    record = Path(__file__).parent / "fixtures" / "records" / "rolesim-2026-11-26"
    trained = record / "rolesim.not-a-profile.toml"
    profile, _ = load_profile(trained)
    assert profile.source is not None
    synthesized = profile.model_copy(update={"source": profile.source.model_copy(
        update={"capture": "capture.duckdb"})})   # as synthesize writes it beside build/train/NAME/
    moved = _capture_relative_to(synthesized, Path("build/train/rolesim"), Path("profiles"))
    assert moved.source is not None and moved.source.capture == "../build/train/rolesim/capture.duckdb"


def test_a_misspelt_target_process_fails_train_before_it_measures_and_writes_no_profile(
        tmp_path: Path) -> None:
    """The service starts and is ready, but `[target] process` names nothing: train stops there
    (exit 3, TargetError) with the service's real process name, and leaves no profile or record.

    train's capture takes the whole host's turn (runtime/lab/turns.py) and so waits for a running
    lab VM: beside a 22-minute lab ladder this test timed out twice after 300 s of waiting
    (2026-12-01), doing none of its own work. What it checks fails before anything is captured,
    so it does not take turns (THREADWISE_LAB_TURNS=off)."""
    import os
    import sys

    text = bundled_workload_path("rolesim").read_text().replace('process = "rolesim"', 'process = "rolesimm"')
    workload = tmp_path / "misspelt.toml"
    workload.write_text(text)
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "train", "--workload", str(workload),
                           "--name", "misspelt", "--lab", "--levels", "0", "--repeats", "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "THREADWISE_LAB_TURNS": "off"})
    assert done.returncode == 3, done.stderr
    assert "[target] process = 'rolesimm' names no running process" in done.stderr
    assert "did you mean 'rolesim'?" in done.stderr
    assert not (tmp_path / "profiles" / "misspelt.toml").exists()
    assert not (tmp_path / "artifacts" / "misspelt").exists()


@pytest.mark.parametrize("case", ["rolesim-capture", "redis-poller-capture"])
def test_train_synthesizes_in_process_what_the_synthesize_command_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """train's start profile comes from synthesize's builder in-process: the typed profile is the one
    `threadwise synthesize` writes (its TOML read back equals it), and the kept TOML is byte-identical."""
    import json

    import polars as pl

    import threadwise.analyze
    from threadwise.refine.train import synthesize_start
    from threadwise.shape import parse_shape
    from threadwise.synthesize.build import analysis_from_dict
    from threadwise.synthesize.cli import synthesize_command
    from threadwise.synthesize.reader import load_profile

    fixture = Path(__file__).parents[1] / "synthesize" / "fixtures" / "analysis" / f"{case}.json"
    record = analysis_from_dict(json.loads(fixture.read_text()))
    fake = SimpleNamespace(**{**vars(record), "groups": pl.DataFrame([dict(vars(r)) for r in record.groups])})
    monkeypatch.setattr(threadwise.analyze, "analyze_capture", lambda path: fake, raising=False)
    monkeypatch.chdir(tmp_path)
    capture = Path("work/capture.duckdb")
    capture.parent.mkdir()
    capture.write_bytes(b"a capture")
    shape = "cores=2,threads-per-core=1"
    lines: list[str] = []
    ours = synthesize_start(capture, "rs", parse_shape(shape), Path("work/synthesized.toml"), lines.append)
    synthesize_command(captures=[str(capture)], name="rs", output=Path("work/cli.toml"), request=None,
                       example=False, max_groups=6, families=None, force=False, shape=shape)
    assert ours == load_profile(Path("work/cli.toml"))[0]
    assert Path("work/synthesized.toml").read_text() == Path("work/cli.toml").read_text()
    assert ours.source is not None and ours.source.capture == "capture.duckdb"
    assert lines[0] == (f"$ threadwise synthesize {capture} --name rs -o work/synthesized.toml --force "
                        f"--shape {shape}")
    assert lines[-1].startswith("wrote work/synthesized.toml: ")


def test_where_the_cells_run_is_a_typed_shape() -> None:
    """The lab's shape travels typed (one thread per vCPU) and is text only where it is stored."""
    from threadwise.shape import host_shape, synthetic

    lab = Where(lab=True, cpus=2)
    assert lab.shape == synthetic(2) and lab.shape.spec == "cores=2,threads-per-core=1"
    assert Where(lab=False, cpus=2).shape == host_shape()


def test_a_failed_synthesis_is_a_failed_train_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from threadwise.errors import ThreadwiseError
    from threadwise.refine.train import synthesize_start
    from threadwise.shape import synthetic

    capture = tmp_path / "capture.duckdb"   # not there
    with pytest.raises(ThreadwiseError, match="train step failed: threadwise synthesize ") as failed:
        synthesize_start(capture, "rs", synthetic(2), tmp_path / "s.toml", lambda line: None)
    assert failed.value.exit_code == 1 and not (tmp_path / "s.toml").exists()


def test_skip_leaves_the_named_candidates_out_and_knows_which_names_matched(tmp_path: Path) -> None:
    """--skip: a search resumed after a record measured some candidates leaves them out; a name
    that matches no offered candidate (a typo) is known, so train can say so."""
    from threadwise.refine.search.mutate import all_mutations
    from threadwise.refine.train import _Skipping, limitations
    from threadwise.shape import parse_shape
    from threadwise.synthesize.reader import load_profile

    profile, _ = load_profile(Path(__file__).parents[2] / "profiles" / "redis.toml")
    shape = parse_shape("cores=2,threads-per-core=1,reserve=1")
    every = [c.name for c in all_mutations(profile, shape)]
    skip = ("io_thd-redis-server:preemptible", "io_thd-redis-server:treatment=latency",
            "io_thd-redis-server:treatmnet=batch")
    offered = _Skipping(all_mutations, skip)
    names = [c.name for c in offered(profile, shape)]
    assert names == [n for n in every if n not in skip[:2]]
    assert offered.skipped == set(skip[:2])           # the typo matched nothing
    workload = SimpleNamespace(objective=SimpleNamespace(window_s=5.0, warmup_s=1.0), service=None,
                               load=SimpleNamespace(source="command"))
    said = limitations(options(tmp_path, skip=skip), workload)  # type: ignore[arg-type]
    assert said[-1].startswith("Not measured on request (--skip")
    assert "`io_thd-redis-server:treatment=latency`" in said[-1]
    assert said[-2].startswith("The load command is the target")   # its probe stays in the window


def test_a_step_ladder_runs_once_more_after_tcgs_patching_oops_and_only_then() -> None:
    from threadwise.errors import LabError
    from threadwise.refine.search.step_ladders import once_more_after_tcg_oops

    oops = LabError("the initramfs guest ended (qemu exited 0) before sending the results archive; "
                    "last console lines:\n  [   80.645828] Oops: int3: 0000 [#1] SMP NOPTI")
    calls: list[str] = []
    said: list[str] = []

    def crashes_once(raw: str) -> object:
        calls.append(raw)
        if len(calls) == 1:
            raise oops
        return "run"

    assert once_more_after_tcg_oops(crashes_once, "step5", "step 5", said.append) == "run"  # type: ignore[arg-type]
    assert calls == ["raw-step5", "raw-step5-again"] and "step 5's ladder runs once more" in said[0]
    calls.clear()
    assert once_more_after_tcg_oops(crashes_once, "screen", "the screen", said.append) == "run"  # type: ignore[arg-type]
    assert calls == ["raw-screen", "raw-screen-again"] and "the screen's ladder runs once more" in said[-1]

    def always(error: LabError):  # type: ignore[no-untyped-def]
        def ladder(raw: str) -> object:
            calls.append(raw)
            raise error
        return ladder

    calls.clear()
    with pytest.raises(LabError, match="Oops: int3"):           # twice: the search stops there
        once_more_after_tcg_oops(always(oops), "step2", "step 2", said.append)  # type: ignore[arg-type]
    assert calls == ["raw-step2", "raw-step2-again"]
    calls.clear()
    with pytest.raises(LabError, match="timed out"):            # not the emulator's race: no retry
        once_more_after_tcg_oops(always(LabError("the guest timed out")), "step3", "step 3",  # type: ignore[arg-type]
                                 said.append)
    assert calls == ["raw-step3"]
