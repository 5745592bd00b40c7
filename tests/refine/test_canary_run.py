"""The canary's loop (refine/canary/run.py) with a stand-in scheduler switch and service (this host
has no sched_ext; the lab tier runs the real one): it rolls back a loss, keeps a gain, decides
nothing on an A/A, obeys its guards and SIGTERM, and writes every window to a real record."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tests.lost_signal import SignalInFinalizer
from threadwise.errors import SchedulerFailure, UsageError
from threadwise.refine.canary import record
from threadwise.refine.canary.run import Outcome, Settings, run_canary
from threadwise.refine.canary.sequence import Metric

ROOT = Path(__file__).resolve().parents[2]

METRICS = (Metric("hot_chunks_per_s", True, 0.10, primary=True), Metric("worker_lat_p99_us", False, 0.10))


class Host:
    """A stand-in service and scheduler: the switch flips sysfs' state; the service's metrics are
    `effect` (primary ratio, secondary ratio) times lognormal noise while the profile runs."""

    def __init__(self, effect: tuple[float, float], *, seed: int = 1, ejected_after: int | None = None):
        self.effect, self.enabled, self.rng = effect, False, np.random.default_rng(seed)
        self.attaches = self.detaches = self.kept = 0
        self.ejected_after = ejected_after
        self.now = 0.0

    # the Switch
    def attach(self) -> None:
        self.attaches += 1
        self.enabled = True

    def keep(self) -> None:
        assert self.enabled, "kept while not attached"
        self.kept += 1

    def detach(self) -> None:
        self.detaches += 1
        self.enabled = False

    def state(self) -> str:
        if self.ejected():
            return "disabled"
        return "enabled" if self.enabled else "disabled"

    def ejected(self) -> bool:
        return self.ejected_after is not None and self.attaches > self.ejected_after

    def ended_why(self) -> str | None:
        if not self.ejected():
            return None
        return "error_stall: EXIT: runnable task stall (kworker failed to run for 30 s)"

    # the Probe
    def describe(self) -> str:
        return "a stand-in"

    def begin(self, window_s: float) -> None:
        return None

    def end(self) -> dict[str, float]:
        hot, p99 = 2000.0 * math.exp(self.rng.normal(0, 0.05)), 500.0 * math.exp(self.rng.normal(0, 0.05))
        if self.enabled:
            hot, p99 = hot * self.effect[0], p99 * self.effect[1]
        return {"hot_chunks_per_s": hot, "worker_lat_p99_us": p99}

    def close(self) -> None:
        return None

    # time passes only when the loop sleeps
    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def canary(tmp_path: Path, host: Host, *, max_duration_s: float = 3600.0, max_regression: float | None = None,
           per_visit: int = 1) -> tuple[object, duckdb.DuckDBPyConnection]:
    settings = Settings(METRICS, window_s=5.0, warmup_s=1.0, max_duration_s=max_duration_s,
                        max_regression=max_regression, alpha=0.05, clip_ratio=1.5,
                        windows_per_visit=per_visit)
    head = record.CanaryRow("2026-11-28 18:00:00", "threadwise canary test", "p.toml", "", "pid 1",
                            "stand-in", "[]", 0.05, 1.5, 5.0, 1.0, max_duration_s, max_regression, "test",
                            "1.1.4")
    con = record.create(tmp_path / "canary.duckdb", head)
    result = run_canary(host, host, settings, con, target_pid=None, progress=lambda _line: None,
                        clock=host.clock, sleep=host.sleep)
    return result, con


def test_a_loss_is_rolled_back_and_every_window_is_recorded(tmp_path):
    host = Host((1 / 1.3, 1.0))
    result, con = canary(tmp_path, host)
    assert result.outcome is Outcome.ROLLED_BACK and "worse beyond its margin" in result.reason
    assert not host.enabled and host.state() == "disabled"
    windows = con.execute(record.sql("window_rows")).fetchall()
    assert len(windows) == result.windows and all(row[8] for row in windows)
    assert [row[2] for row in windows[:4]] == ["profile", "default", "default", "profile"]
    # two profile windows in a row share one attach: block 2 starts where block 1 ended
    assert host.attaches <= result.windows // 4 + 1
    bounds = con.execute(record.sql("bounds_by_pair")).fetchall()
    assert len(bounds) == 2 * result.pairs and bounds[-1][5] == "worse"
    assert con.execute("SELECT outcome FROM canary").fetchone() == ("rolled_back",)


def test_visits_of_several_windows_pair_window_by_window_and_share_an_attach(tmp_path):
    host = Host((1 / 1.3, 1.0))
    result, con = canary(tmp_path, host, per_visit=2)
    assert result.outcome is Outcome.ROLLED_BACK
    windows = con.execute(record.sql("window_rows")).fetchall()
    assert [(row[2], row[1]) for row in windows[:8]] == [
        ("profile", 0), ("profile", 1), ("default", 0), ("default", 1),
        ("default", 2), ("default", 3), ("profile", 2), ("profile", 3)]
    assert host.attaches <= result.windows // 8 + 1


def test_the_summary_and_its_plot_come_from_the_record_alone(tmp_path):
    from threadwise.refine.canary.summary import write_summary

    result, con = canary(tmp_path, Host((1 / 1.3, 1.0)))
    summary = write_summary(con, tmp_path / "canary.duckdb")
    text = summary.read_text()
    assert summary.name == "canary.md" and (tmp_path / "canary.png").stat().st_size > 1000
    assert "**rolled_back**" in text and f"{result.windows} windows" in text
    assert "| hot_chunks_per_s | " in text and "| worse |" in text


def test_a_gain_is_kept_attached(tmp_path):
    host = Host((1.3, 1.0))
    result, _con = canary(tmp_path, host)
    assert result.outcome is Outcome.KEPT and host.enabled
    assert host.kept == 1   # released to its supervisor: no longer stopped when the canary ends


def test_an_aa_canary_decides_nothing_and_rolls_back_at_its_deadline(tmp_path):
    host = Host((1.0, 1.0), seed=4)
    result, _con = canary(tmp_path, host, max_duration_s=600.0)
    assert result.outcome is Outcome.NO_DECISION and "no measurable benefit" in result.reason
    assert not host.enabled and result.seconds <= 600.0


def test_one_window_past_the_regression_floor_rolls_back_at_once(tmp_path):
    host = Host((1 / 1.5, 1.0))
    result, _con = canary(tmp_path, host, max_regression=0.2)
    assert result.outcome is Outcome.ROLLED_BACK and "--max-regression" in result.reason
    assert result.windows == 4   # the first profile window after a default one
    assert not host.enabled


def test_an_ejected_scheduler_ends_the_canary(tmp_path):
    host = Host((1.0, 1.0), ejected_after=1)
    result, _con = canary(tmp_path, host)
    assert result.outcome is Outcome.ROLLED_BACK and "not running" in result.reason
    # the scheduler's own words: an ejection is never read as the profile judged worse
    assert "scx_layered ended: error_stall: EXIT: runnable task stall" in result.reason
    assert "worse" not in result.reason


def test_an_attach_that_fails_leaves_the_default_scheduler(tmp_path):
    host = Host((1.0, 1.0))

    def refused() -> None:
        raise SchedulerFailure("scx_layered did not attach: attach_timeout: not attached after 60 s")

    host.attach = refused  # type: ignore[method-assign]
    result, con = canary(tmp_path, host)
    assert result.outcome is Outcome.ROLLED_BACK and "did not attach" in result.reason
    assert result.windows == 0 and not host.enabled
    assert con.execute("SELECT outcome FROM canary").fetchone() == ("rolled_back",)


def test_sigterm_rolls_back_before_the_canary_exits(tmp_path):
    host = Host((1.0, 1.0))
    real_sleep = host.sleep

    def sleep_then_term(seconds: float) -> None:
        real_sleep(seconds)
        if host.now > 30:
            os.kill(os.getpid(), signal.SIGTERM)

    host.sleep = sleep_then_term  # type: ignore[method-assign]
    result, con = canary(tmp_path, host)
    assert result.outcome is Outcome.INTERRUPTED and "SIGTERM" in result.reason
    assert not host.enabled
    assert con.execute("SELECT outcome FROM canary").fetchone() == ("interrupted",)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_whose_exception_was_lost_still_rolls_back(tmp_path):
    host = Host((1.0, 1.0))
    real_sleep = host.sleep
    sent = []

    def sleep_then_term(seconds: float) -> None:
        real_sleep(seconds)
        if host.now > 30 and not sent:
            sent.append(host.now)
            SignalInFinalizer()

    host.sleep = sleep_then_term  # type: ignore[method-assign]
    result, con = canary(tmp_path, host)
    assert sent and result.outcome is Outcome.INTERRUPTED and "SIGTERM" in result.reason
    assert host.now < sent[0] + 30, "the canary judged on after the signal"
    assert not host.enabled
    assert con.execute("SELECT outcome FROM canary").fetchone() == ("interrupted",)


def test_a_sigterm_that_surfaces_as_a_duckdb_error_still_rolls_back(tmp_path):
    """DuckDB turns a KeyboardInterrupt raised in a query into its own error (here in a Python
    function the query calls; "Query interrupted" in a long one)."""
    host = Host((1.0, 1.0))
    real_end = host.end
    side = duckdb.connect()
    side.create_function("term", lambda: os.kill(os.getpid(), signal.SIGTERM) or 1, [], "INTEGER")

    def end_then_term() -> dict[str, float]:
        if host.now > 30:
            side.execute("SELECT term()").fetchall()
        return real_end()

    host.end = end_then_term  # type: ignore[method-assign]
    result, con = canary(tmp_path, host)
    assert result.outcome is Outcome.INTERRUPTED and "SIGTERM" in result.reason
    assert not host.enabled
    assert con.execute("SELECT outcome FROM canary").fetchone() == ("interrupted",)


def test_an_existing_record_is_kept_unless_forced(tmp_path):
    (tmp_path / "canary.duckdb").write_text("mine")
    with pytest.raises(UsageError, match="exists") as refused:
        canary(tmp_path, Host((1.0, 1.0)))
    assert "--force" in (refused.value.hint or "")
    assert (tmp_path / "canary.duckdb").read_text() == "mine"


def test_a_host_without_sched_ext_is_told_where_a_profile_can_be_judged(tmp_path, monkeypatch):
    """A canary judges this host's service: the lab cannot stand in, the ladder can (the hint)."""
    from threadwise.errors import MissingTool
    from threadwise.refine.canary.command import CanaryOptions, canary
    from threadwise.runtime import scx
    from threadwise.shape import synthetic

    monkeypatch.setattr(scx, "SCHED_EXT", tmp_path / "no-sched-ext")
    profile = ROOT / "benchmarks" / "data" / "rolesim-worker-nopreempt.toml"
    (tmp_path / "service.log").write_text("")
    options = CanaryOptions(profile=profile, workload="rolesim", pid=os.getpid(),
                            probe_log=tmp_path / "service.log", shape=synthetic(2), margin=0.10,
                            max_duration_s=60.0, alpha=0.05, out=tmp_path / "canary.duckdb", command="pytest")
    with pytest.raises(MissingTool) as refused:
        canary(options)
    assert "has no sched_ext" in refused.value.message
    assert f"threadwise ladder rolesim --arm {profile} --lab" in refused.value.hint
    assert not (tmp_path / "canary.duckdb").exists()


def test_a_window_whose_probe_cannot_start_is_left_out_and_the_canary_goes_on(tmp_path):
    from threadwise.errors import MetricsError

    class Flaky(Host):
        """An endpoint that does not answer at the start of every fifth window."""

        calls = 0

        def begin(self, window_s: float) -> None:
            self.calls += 1
            if self.calls % 5 == 0:
                raise MetricsError("http://127.0.0.1:9/metrics did not answer: refused")

    result, con = canary(tmp_path, Flaky((1 / 1.3, 1.0)))
    assert result.outcome is Outcome.ROLLED_BACK
    windows = con.execute(record.sql("window_rows")).fetchall()
    left_out = [row for row in windows if not row[8]]
    assert left_out and all("did not answer" in row[9] for row in left_out)
    assert result.pairs < result.windows // 2   # a pair with a window left out is not judged
