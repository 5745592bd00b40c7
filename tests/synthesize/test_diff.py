"""`threadwise diff`: golden text and markdown outputs, a capture's threads, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.shape import parse_shape
from threadwise.synthesize.diff import diff_profiles
from threadwise.synthesize.diff_render import render_text
from threadwise.words import plain

HERE = Path(__file__).parent / "fixtures" / "diff"
UPDATE = os.environ.get("THREADWISE_UPDATE_GOLDEN") == "1"
# redis-before.toml: the Redis capture's profile before compaction (git f9bf8f7),
# redis-after.toml: the same analysis synthesized with compaction and families;
# {jvm,redis}-capture-{before,after}.toml: live captures (refine/workloads/PoolService.java; Redis
# under redis-benchmark) synthesized by f9bf8f7 (before) and by this branch (after)


def tw(*args: str, cwd: Path = HERE) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, cwd=cwd)


@pytest.mark.parametrize("case", ["redis", "jvm-capture", "redis-capture"])
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_diff_golden(fmt: str, case: str) -> None:
    done = tw("diff", f"{case}-before.toml", f"{case}-after.toml", "--shape", "cores=4,threads-per-core=2",
              "--format", fmt)
    assert done.returncode == 0, done.stderr
    golden = HERE / f"{case}.diff.{'md' if fmt == 'markdown' else 'txt'}"
    before = golden.read_text() if golden.exists() else None
    if UPDATE and done.stdout != before:
        golden.write_text(done.stdout)
    assert before is not None, f"no golden {golden.name}: run with THREADWISE_UPDATE_GOLDEN=1"
    assert done.stdout == before, f"{golden.name} changed: review, then update the golden"


def test_identical_profiles_have_no_changes() -> None:
    done = tw("diff", "redis-after.toml", "redis-after.toml", "--shape", "cores=2")
    assert done.returncode == 0 and "no scheduling changes" in done.stdout, done.stdout


def test_a_capture_decides_which_threads_move(tmp_path: Path) -> None:
    from threadwise.observe.builder import CaptureBuilder

    cap = CaptureBuilder(target_tgids=[10])
    for tid, name in {10: "redis-server", 11: "bio_close_file", 12: "io_thd_1", 13: "newpool-0"}.items():
        cap.thread(tid, 10, name)
        cap.slice(tid, 0, cap.start_ts + tid * 1_000_000, 50_000)
    path = cap.write(tmp_path / "c.duckdb")
    result = diff_profiles(HERE / "redis-before.toml", HERE / "redis-after.toml", capture=path)
    assert result.threads_checked == 4 and plain(result.threads_from) == f"capture {path}"
    moved = {m.thread: (plain(m.old), plain(m.new)) for m in result.moves}
    # newpool-0 (no group in either) stays in the catch-all; the others keep their groups
    assert moved == {"bio_close_file": ("bio (default)", "bio-and-jemalloc_bg_thd (housekeeping)")}
    assert "bio_close_file: bio (default) -> bio-and-jemalloc_bg_thd (housekeeping)" in render_text(result)


def test_reorder_rename_and_treatment_changes(tmp_path: Path) -> None:
    text = (HERE / "redis-after.toml").read_text()
    first = text.index("[[group]]")
    second = text.index("[[group]]", first + 1)
    third = text.index("[[group]]", second + 1)
    swapped = text[:first] + text[second:third] + text[first:second] + text[third:]
    swapped = swapped.replace('name = "io_thd"', 'name = "io"').replace(
        'treatment = "housekeeping"', 'treatment = "batch"')
    (tmp_path / "new.toml").write_text(swapped)
    result = diff_profiles(HERE / "redis-after.toml", tmp_path / "new.toml",
                           shape=parse_shape("cores=2,threads-per-core=1"))
    assert result.renamed == [("io_thd", "io")] and result.reordered
    assert any(c.field == "treatment" and (plain(c.old), plain(c.new)) == ("housekeeping", "batch")
               for c in result.changes)
    assert any(c.field == "weight" for c in result.layer_changes)


def test_different_schema_versions_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "v2.toml"
    text = (HERE / "redis-after.toml").read_text()
    newer.write_text(text.replace("schema_version = 1", "schema_version = 2"))
    done = tw("diff", str(HERE / "redis-after.toml"), str(newer))
    assert done.returncode == 2, done.stderr
    assert f"redis-after.toml:3: schema_version 1, but {newer}:3: schema_version 2" in done.stderr
    assert "hint:" in done.stderr and "Traceback" not in done.stderr


def test_bad_input_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    text = (HERE / "redis-after.toml").read_text()
    broken.write_text(text.replace('treatment = "latency"', "treatment = 7", 1))
    done = tw("diff", str(HERE / "redis-after.toml"), str(broken))
    assert done.returncode == 2 and f"error: {broken}:" in done.stderr and "Traceback" not in done.stderr
    done = tw("diff", "redis-after.toml", "missing.toml")
    assert done.returncode == 2 and "missing.toml: no such file" in done.stderr
    done = tw("diff", "redis-after.toml", "redis-after.toml", "--format", "html")
    assert done.returncode == 2 and "use text or markdown" in done.stderr
