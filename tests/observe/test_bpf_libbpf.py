"""The libbpf tracer on this host: built from clean, no drops at hackbench rates, exact drops
when its ring is made too small, and the bpftrace backend's counts read from the kernel map.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from threadwise.observe import tracer_build
from threadwise.observe.bpftrace_backend import BpftraceBackend, read_event_counts
from threadwise.observe.capture import COUNTED
from threadwise.observe.libbpf_backend import LibbpfBackend
from threadwise.observe.store import CaptureWriter

pytestmark = pytest.mark.bpf
HACKBENCH = ["hackbench", "-g", "4", "-l", "1000"]


def _needs_hackbench() -> None:
    if shutil.which("hackbench") is None:
        pytest.skip("needs hackbench: apt-get install rt-tests (scripts/setup-system.sh)")


def _needs_tracer() -> None:
    if not tracer_build.binary_path().is_file():
        pytest.skip("the libbpf tracer is not built: run scripts/setup-tracer.sh")


def _trace(backend: LibbpfBackend, workdir: Path, command: list[str]) -> tuple[dict[str, int], object]:
    """Run `command` under the backend into a real capture file; rows per raw table, and the report."""
    writer = CaptureWriter(workdir / "capture.duckdb")
    tracer_dir = workdir / "tracer"
    tracer_dir.mkdir()
    backend.start(tracer_dir)

    def take(chunk) -> None:
        for name, table in chunk.tables.items():
            writer.append(name, table)

    try:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            time.sleep(0.2)
            take(backend.poll())
        chunk, report = backend.stop()
        take(chunk)
        backend.drain_into(writer)   # the records the backend deferred
        assert proc.returncode == 0
        return dict(writer.rows), report
    finally:
        writer.abandon()


def test_builds_from_clean_and_is_cached(tmp_path):
    cache = tmp_path / "cache"
    lines: list[str] = []
    binary = tracer_build.build(cache, progress=lines.append)
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert binary.parent.name == f"tracer-{tracer_build.source_hash()}"
    assert any("building" in line for line in lines)
    usage = subprocess.run([str(binary), "--help"], capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and "--rings" in usage.stderr
    built_at = binary.stat().st_mtime_ns
    lines.clear()
    assert tracer_build.build(cache, progress=lines.append) == binary
    assert lines == [] and binary.stat().st_mtime_ns == built_at   # cached: not rebuilt
    assert [p.name for p in cache.iterdir()] == [binary.parent.name]   # no half-built leftovers


@pytest.mark.parametrize("defer", ["deferred", "live"])
def test_a_hackbench_burst_is_recorded_with_zero_drops(tmp_path, defer):
    _needs_tracer()
    _needs_hackbench()
    backend = LibbpfBackend()
    if defer == "live":
        backend.defer_bytes = 0   # hand records over on every poll, as a long capture does
    rows, report = _trace(backend, tmp_path, HACKBENCH)
    assert report.kernel_counts["switch"] > 20_000
    assert sum(report.dropped.values()) == 0, report.dropped
    for name, table in COUNTED.items():
        assert rows.get(table, 0) == report.kernel_counts[name], name
    assert report.end_ts is not None and report.unparsed == 0


def test_drops_from_a_tiny_ring_are_counted_exactly(tmp_path):
    _needs_tracer()
    _needs_hackbench()
    # 8 KB per ring, never woken early, drained every 500 ms: far too small, on purpose
    rows, report = _trace(LibbpfBackend(ring_kb=8, poll_ms=500, wakeup_kb=1 << 20), tmp_path, HACKBENCH)
    assert report.dropped["switch"] > 1000, report.dropped
    for name, table in COUNTED.items():
        assert report.kernel_counts[name] - rows.get(table, 0) == report.dropped[name], name


def test_bpftrace_counts_are_read_from_the_kernel_map(tmp_path):
    backend = BpftraceBackend()
    backend.check()
    backend.start(tmp_path)
    try:
        time.sleep(0.5)
        backend.poll()
        assert backend._proc is not None
        counts = read_event_counts(backend._proc.pid)
        assert counts is not None and counts.get("switch", 0) > 0, counts
    finally:
        _chunk, report = backend.stop()
    assert report.kernel_counts["switch"] >= counts["switch"]
