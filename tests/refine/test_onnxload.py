"""onnxload, the bundled ONNX Runtime workload's driver, run for real (onnxruntime on this CPU).

The onnxrt workload's numbers come from onnxload's JSON report lines; these tests run the real
driver (the `{onnxload}` script a ladder runs, on a tiny model so a run takes seconds on a busy
host) and check what a ladder relies on: the lines parse into the workload's objective, the
process and every thread it starts carry the comm the profile targets, a service stops on
SIGTERM, the model is the same for the same seed, and bad options or a missing onnxruntime are
an exit status with a reason, never a number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import stop_by_pid
from threadwise.refine.measure.bundled import build_python
from threadwise.refine.measure.metrics import parse_metrics
from threadwise.refine.measure.workload import bundled_workload_path, load_workload, render_argv
from threadwise.refine.workloads import onnxload as driver

pytest.importorskip("onnxruntime", reason="needs onnxruntime: scripts/setup-python.sh all")
pytest.importorskip("onnx", reason="needs onnx: scripts/setup-python.sh all")

# a service that never gets ready would block a readline: bounded here, generous for a busy host
pytestmark = pytest.mark.timeout(600)

TINY = ["--size", "8", "--channels", "4"]   # microseconds an inference: the test is the plumbing


def onnxload(*args: str) -> subprocess.CompletedProcess[str]:
    # the driver's own clock ends a run; the timeout only bounds a hang on a very busy host
    return subprocess.run([str(build_python("onnxload")), *args], capture_output=True, text=True,
                          timeout=180, check=False)


def test_the_script_is_run_by_this_interpreter_under_the_name_onnxload():
    script = build_python("onnxload")
    assert script.name == "onnxload" and os.access(script, os.X_OK)
    assert script.read_text().splitlines()[0] == f"#!{sys.executable}"


def test_a_run_prints_one_json_line_per_report_with_the_objective():
    # Reports of 0.1 s over 1.5 s: a report follows the first inference that ends 0.1 s after
    # the last report, so the count is what the process's CPU share allows. With 0.5-s reports
    # this test failed once beside a lab that claimed the host (2026-12-02; passed 3 of 3 right
    # after, the failing assertion not kept): 3 of them need no stall over 0.5 s, 3 of 0.1 s
    # need only 3 inferences in 1.5 s.
    done = onnxload(*TINY, "--duration", "1.5", "--report-ms", "100")
    assert done.returncode == 0, done.stderr
    assert "onnxload: ready" in done.stderr
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(reports) >= 3
    for fields in reports:
        assert fields["inferences"] > 0 and fields["inferences_per_s"] > 0
        assert 0 < fields["latency_p50_us"] <= fields["latency_p99_us"]
    # a full report's rate is over its own elapsed time, at least the 0.1 s asked for
    for fields in reports[:-1]:
        assert fields["inferences_per_s"] <= fields["inferences"] / 0.1 + 1e-6
    workload = load_workload(bundled_workload_path("onnxrt"))
    values = parse_metrics(workload.load.parser, done.stdout, source=workload.load.source)
    assert values["inferences_per_s"] > 0 and values["latency_p99_us"] > 0


def test_as_a_service_every_thread_is_named_onnxload_and_sigterm_stops_it():
    """The profile targets PcommPrefix `onnxload`: ORT's intra-op pool thread (and the thread its
    import starts) must carry that comm, which they inherit from the process; ORT names none."""
    service = subprocess.Popen([str(build_python("onnxload")), *TINY, "--threads", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert service.stderr is not None and service.stdout is not None
        # readline returns "" when the driver dies; a hang is bounded by this file's timeout
        line = "-"
        while line and "onnxload: ready" not in line:
            line = service.stderr.readline()
        assert "onnxload: ready" in line, (line, service.poll())
        tasks = Path(f"/proc/{service.pid}/task")
        comms = {tid.name: (tid / "comm").read_text().strip() for tid in tasks.iterdir()}
        # the main thread infers, intra-op threads 2 = the caller and one pool thread
        assert len(comms) >= 2 and set(comms.values()) == {"onnxload"}, comms
        first = json.loads(service.stdout.readline())
        assert first["inferences"] > 0
        service.terminate()
        assert service.wait(timeout=60) == 0
    finally:
        if service.poll() is None:
            stop_by_pid(service)


def test_the_model_is_the_same_for_the_same_seed_and_another_for_another():
    one = driver.build_model(size=8, channels=4, seed=3)
    assert one == driver.build_model(size=8, channels=4, seed=3)
    assert one != driver.build_model(size=8, channels=4, seed=4)


@pytest.mark.parametrize("args", [["--threads", "0"], ["--size", "2"], ["--duration", "-1"],
                                  ["--report-ms", "x"], ["--bogus", "1"], ["--duration"]])
def test_bad_options_exit_2_with_usage_and_no_number(args: list[str]):
    done = onnxload(*args)
    assert done.returncode == 2 and "usage: onnxload" in done.stderr and done.stdout == ""


def test_an_interpreter_without_onnxruntime_is_an_error_naming_it():
    # -S: no site-packages, so neither numpy, onnx nor onnxruntime can be imported
    done = subprocess.run([sys.executable, "-S", str(build_python("onnxload")), "--duration", "1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert "is not installed for" in done.stderr and "setup-python.sh all" in done.stderr


def test_the_workload_runs_onnxload_as_a_self_reporting_service_with_two_intra_op_threads():
    workload = load_workload(bundled_workload_path("onnxrt"))
    assert workload.service is not None and workload.load.source == "service"
    assert workload.load.command is None and workload.target.process == "onnxload"
    assert workload.service.ready.log_line == "onnxload: ready"
    argv = render_argv(workload.service.command, window_s=workload.objective.window_s)
    assert argv[0] == str(build_python("onnxload"))
    assert argv[argv.index("--threads") + 1] == "2"
