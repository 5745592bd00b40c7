"""`demo` goes on after lint's findings (exit 7) and train's keep-the-default (exit 12), and stops
on any other non-zero status."""

from __future__ import annotations

import sys

import pytest

from threadwise import demo, givenclock
from threadwise.cli import run_command
from threadwise.errors import FindingsReported, ThreadwiseError


@pytest.fixture
def sample(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "synthesize", "--example", "--name", "s"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return tmp_path / "profiles" / "s.toml"


def test_only_the_findings_code_is_not_fatal(sample, capfd):
    assert {"lint": {FindingsReported.exit_code}} == demo._FINDINGS_OK and 1 not in demo._FINDINGS_OK["lint"]
    demo._run(["lint", str(sample), "--shape", "cores=2,threads-per-core=2"], run_command)   # findings: 7
    shown = capfd.readouterr()
    assert "the demo goes on: lint's findings above are results" in shown.out
    # findings are shown as findings, never as errors
    assert "finding[oversubscribed]" in shown.out and "findings: " in shown.err
    assert "error" not in shown.out + shown.err
    with pytest.raises(ThreadwiseError, match="demo step failed with status 2"):
        demo._run(["lint", str(sample.with_name("missing.toml"))], run_command)


def test_a_status_the_step_names_as_a_result_is_returned_not_raised(sample):
    # validate of a missing file exits 2: a result only where the caller says so (train's 12)
    missing = str(sample.with_name("missing.toml"))
    assert demo._run(["validate", missing], run_command, results=frozenset({2})) == 2
    assert demo._run(["validate", str(sample)], run_command) == 0
    with pytest.raises(ThreadwiseError, match="status 2"):
        demo._run(["validate", missing], run_command, results=frozenset({demo._KEEP_DEFAULT}))


def test_no_cell_is_traced_without_a_search_unless_the_user_asks(monkeypatch):
    from threadwise.refine.measure.blockers import TRACE_ENV, policy

    monkeypatch.delenv(TRACE_ENV, raising=False)
    with demo._tracing(0) as line:
        assert policy() == "off" and line is not None and "--budget 0" in line
    assert TRACE_ENV not in demo.os.environ and policy() == "top"
    with demo._tracing(1) as line:
        assert line is None and policy() == "top"
    monkeypatch.setenv(TRACE_ENV, "all")
    with demo._tracing(0) as line:
        assert line is None and policy() == "all"
    assert demo.os.environ[TRACE_ENV] == "all"
