"""The four commands end to end, as a user runs them (`python -m threadwise.cli ...`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from threadwise import givenclock


def tw(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    done = tw("synthesize", "--example", "--name", "sample", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote profiles/sample.toml: 4 groups (worker=exclusive")
    return tmp_path / "profiles" / "sample.toml"


def test_validate_a_valid_profile(sample: Path) -> None:
    done = tw("validate", str(sample), cwd=sample.parent)
    assert (done.returncode, done.stdout) == (0, f"{sample}: valid (4 groups, 0 warnings)\n")


def test_validate_missing_file(tmp_path: Path) -> None:
    done = tw("validate", "nope.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "error: nope.toml: no such file\nhint: check the path to the profile TOML\n"


def test_validate_bad_toml_gives_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('schema_version = 1\nname = "x"\n[workload]\nprocess = x y\n')
    done = tw("validate", "bad.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: bad.toml: invalid (1 error, 0 warnings)\n"
                                  "bad.toml:4:11: error[toml_syntax]: invalid TOML: ")


def test_validate_unknown_key(sample: Path) -> None:
    text = sample.read_text().replace("hot_threads = 2", "hot_thread = 2")
    line = text.splitlines().index("hot_thread = 2") + 1
    sample.write_text(text)
    done = tw("validate", "sample.toml", cwd=sample.parent)
    assert done.returncode == 2
    assert done.stderr.startswith(
        "error: sample.toml: invalid (1 error, 0 warnings)\n"
        f"sample.toml:{line}: error[schema]: unknown key 'group[0].hot_thread'\n"
        "  hint: did you mean 'hot_threads'? allowed here: avg_runtime_us, comment, cpu_fraction, ")


def test_validate_json_report(sample: Path) -> None:
    sample.write_text(sample.read_text().replace('"io_thd_*"', '"*_thd_1"'))
    done = tw("validate", "--json", "sample.toml", cwd=sample.parent)
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["valid"] is False
    assert [p["rule"] for p in report["problems"]] == ["suffix_pattern", "evidence_unmatched"]


@pytest.mark.scx
def test_compile_with_oracle_check(sample: Path, scx_binary: Path) -> None:
    done = tw("compile", "sample.toml", "--shape", "cores=2,threads-per-core=1", "--check",
              cwd=sample.parent)
    assert done.returncode == 0, done.stderr
    specs = json.loads(done.stdout)
    assert [s["name"] for s in specs] == ["worker", "io_thd", "compactor", "bio", "rest"]
    assert "note: group 'worker' demoted from exclusive (Confined) to Grouped" in done.stderr
    assert "checked: scx_layered 1.1.4 accepts the config and kept every option" in done.stderr


def test_compile_refuses_an_invalid_profile(sample: Path) -> None:
    sample.write_text(sample.read_text().replace('"bio_*"', '"bio_much_too_long_prefix"'))
    done = tw("compile", "sample.toml", "--shape", "cores=4", cwd=sample.parent)
    assert done.returncode == 2
    line = sample.read_text().splitlines().index('match = ["bio_much_too_long_prefix"]') + 1
    assert done.stderr.startswith(
        f"error: {sample.name}:{line}: group 'bio': prefix 'bio_much_too_long_prefix' is 24 "
        "bytes; the kernel keeps 15 bytes of a comm, so it can never match [prefix_too_long]\n"
        "hint: use at most the first 15 bytes: 'bio_much_too_lo'\n")


def test_compile_bad_shape(sample: Path) -> None:
    done = tw("compile", "sample.toml", "--shape", "cores=two", cwd=sample.parent)
    assert done.returncode == 2
    assert done.stderr.startswith("error: bad shape item 'cores=two'")


def test_lint_reports_and_exits_nonzero(sample: Path) -> None:
    done = tw("lint", "sample.toml", "--shape", "cores=2,threads-per-core=2", cwd=sample.parent)
    assert done.returncode == 7   # findings: FindingsReported, not 1 (a failure or a crash)
    assert done.stdout.startswith("finding[smt_collision]: layer 'worker': 2 hot threads in 1 whole core")
    assert "finding[oversubscribed]" in done.stdout
    assert "\nfindings: sample.toml: 2 placement problems" in done.stderr
    assert "error" not in done.stdout + done.stderr
    clean = tw("lint", "sample.toml", "--shape", "cores=8,threads-per-core=2", "--json",
               cwd=sample.parent)
    assert clean.returncode == 0
    assert json.loads(clean.stdout)["findings"] == []


def test_lint_a_compiled_json_config(sample: Path) -> None:
    assert tw("compile", "sample.toml", "-s", "cores=8,threads-per-core=2", "-o", "c.json",
              cwd=sample.parent).returncode == 0
    done = tw("lint", "c.json", "--shape", "cores=8,threads-per-core=2", cwd=sample.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_synthesize_from_a_capture_calls_analyze(tmp_path: Path, monkeypatch) -> None:
    """The CAPTURE path: analyze_capture -> builder -> profiles/NAME.toml (analysis faked)."""
    import polars as pl

    import threadwise.analyze
    from threadwise.synthesize.build import analysis_from_dict
    from threadwise.synthesize.cli import synthesize_command
    from threadwise.synthesize.reader import load_profile

    fixture = Path(__file__).parent / "fixtures" / "analysis" / "rolesim.json"
    analysis = analysis_from_dict(json.loads(fixture.read_text()))

    class FakeAnalysis:
        groups = pl.DataFrame([dict(vars(row)) for row in analysis.groups])
        process_name, duration_ns, nr_cpus = "rolesim", 10**10, 4
        events_lost, caveats = 0, []

    seen = []
    monkeypatch.setattr(threadwise.analyze, "analyze_capture",
                        lambda path: seen.append(path) or FakeAnalysis(), raising=False)
    monkeypatch.chdir(tmp_path)
    synthesize_command(captures=["r.duckdb"], name="rs", output=None,
                       request=["hot-*=2250"], example=False)
    assert seen == [Path("r.duckdb")]
    profile, _ = load_profile(tmp_path / "profiles" / "rs.toml")
    hot = profile.groups[0]
    assert (hot.name, hot.request_millicores, hot.cpu_fraction, hot.exclusive_cores()) == (
        "hot", 2250, 0.85, 2)
    # stored relative to the profile (profiles/rs.toml), so the two travel together
    assert profile.source is not None and profile.source.capture == "../r.duckdb"


def test_lint_with_a_capture(tmp_path: Path) -> None:
    from threadwise.observe.builder import CaptureBuilder
    from threadwise.synthesize.schema import Group, Profile, Workload
    from threadwise.synthesize.writer import dumps

    names = {10: "proc", 11: "hot-0", 12: "compactor"}
    cap = CaptureBuilder(start_ts=0, duration_ns=10**9, target_tgids=[10])
    cap.events("raw_sched_switch", [(1_000, 0, 0, 0, 120, 11, 120), (1_000, 1, 0, 0, 120, 12, 120)])
    cap.events("raw_task_seen", [(1, tid, 10, name) for tid, name in names.items()])
    for tid, name in names.items():
        cap.snapshot(1, "start", tid, 10, name)
    cap.write(tmp_path / "c.duckdb")
    profile = Profile(schema_version=1, name="p", workload=Workload(process="proc"), group=[
        Group(name="hot", match=["hot-"], treatment="exclusive", hot_threads=1)])
    (tmp_path / "p.toml").write_text(dumps(profile))
    done = tw("lint", "p.toml", "--shape", "cores=2", "--capture", "c.duckdb", "--json",
              cwd=tmp_path)
    assert done.returncode == 7
    [finding] = json.loads(done.stdout)["findings"]
    assert (finding["lint"], finding["threads"]) == ("uncovered", ["compactor"])


def test_outputs_are_never_replaced_without_force(sample: Path) -> None:
    edited = sample.read_text() + "# a hand edit\n"
    sample.write_text(edited)
    for argv in (("synthesize", "--example", "--name", "sample", "-o", "sample.toml"),
                 ("compile", "sample.toml", "--shape", "cores=4", "-o", "sample.toml")):
        done = tw(*argv, cwd=sample.parent)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: sample.toml already exists; not replaced\n")
        assert "--force" in done.stderr
        assert sample.read_text() == edited
    done = tw("synthesize", "--example", "--name", "sample", "-o", "sample.toml", "--force",
              cwd=sample.parent)
    assert done.returncode == 0, done.stderr
    assert "# a hand edit" not in sample.read_text()
    done = tw("compile", "sample.toml", "--shape", "cores=4", "-o", "c.json", cwd=sample.parent)
    assert done.returncode == 0, done.stderr
    assert json.loads((sample.parent / "c.json").read_text())
    assert sorted(p.name for p in sample.parent.iterdir() if p.name.startswith(".")) == []


def test_write_output_is_atomic(tmp_path: Path) -> None:
    from threadwise.errors import UsageError
    from threadwise.paths import write_output

    target = tmp_path / "sub" / "out.txt"
    write_output(target, "one", force=False)
    with pytest.raises(UsageError, match="already exists"):
        write_output(target, "two", force=False)
    inode = target.stat().st_ino
    write_output(target, "two", force=True)
    assert target.read_text() == "two" and target.stat().st_ino != inode   # a new file renamed in
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]
    with pytest.raises(UsageError, match="is a directory"):
        write_output(tmp_path, "x", force=True)


def test_lint_says_when_the_capture_is_of_another_process(tmp_path: Path) -> None:
    from threadwise.observe.builder import CaptureBuilder
    from threadwise.synthesize.schema import Group, Profile, Workload
    from threadwise.synthesize.writer import dumps

    cap = CaptureBuilder(start_ts=0, duration_ns=10**9, target_tgids=[10])
    cap.events("raw_task_seen", [(1, tid, 10, name) for tid, name in {10: "rolesim", 11: "hot-0"}.items()])
    for tid, name in {10: "rolesim", 11: "hot-0"}.items():
        cap.snapshot(1, "start", tid, 10, name, process_comm="rolesim")
    cap.write(tmp_path / "rolesim.duckdb")
    profile = Profile(schema_version=1, name="redis", workload=Workload(process="redis-server"), group=[
        Group(name="io", match=["io_thd_"], treatment="latency")])
    (tmp_path / "redis.toml").write_text(dumps(profile))
    done = tw("lint", "redis.toml", "--shape", "cores=2", "--capture", "rolesim.duckdb", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: rolesim.duckdb is not a capture of this profile's workload: its "
                                  "target process is 'rolesim', the profile's is 'redis-server'\n")
    assert "uncovered" not in done.stdout + done.stderr
