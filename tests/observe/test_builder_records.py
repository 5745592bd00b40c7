"""CaptureBuilder.tracer_records: a libbpf tracer's record files from a run elsewhere (a lab guest)
become a capture through observe's own reader and ingest, like a live capture's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from threadwise.observe.builder import CaptureBuilder
from threadwise.observe.records import SWITCH, TW_SWITCH
from threadwise.observe.store import open_capture


def test_record_files_become_slices_and_the_capture_says_libbpf(tmp_path: Path):
    records = tmp_path / "records"
    records.mkdir()
    switches = [(TW_SWITCH, 0, 100, 0, 0, 120, 7, 120), (TW_SWITCH, 0, 300, 1, 7, 120, 0, 120)]
    raw = np.array(switches, dtype=SWITCH).tobytes()
    (records / "switch.bin").write_bytes(raw + raw[:10])  # a record cut short is never read
    capture = CaptureBuilder(start_ts=0, duration_ns=400, host="lab guest", kernel_release="7.3.4")
    capture.tracer_records(records).events("raw_task_seen", [(400, 7, 7, "seven")])
    path = capture.write(tmp_path / "c.duckdb")
    with open_capture(path) as con:
        slices = con.execute("SELECT ts, dur, t.name, end_state FROM sched_slice "
                             "JOIN thread t USING (utid) WHERE t.tid = 7").fetchall()
        meta = con.execute("SELECT host, kernel_release, tracer_backend, events_recorded FROM capture"
                           ).fetchone()
    assert slices == [(100, 200, "seven", "S")]
    assert meta[:3] == ("lab guest", "7.3.4", "libbpf")
    assert meta[3] == 2  # the switches (a sighting is no event)
