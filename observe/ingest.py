"""Move the libbpf tracer's record files into a capture's raw tables at millions of events per second.

Problem: the records are decoded by numpy (records.py), but how they are read and appended
decides the speed. Decoding 256 MB at a time walks far more memory than the CPU caches hold
and faults in fresh pages for every read (1.9 s of CPU for 10M records on this 2-core host);
appending every small decoded batch as its own INSERT (plus a CHECKPOINT) pays DuckDB's
per-statement cost thousands of times.
Approach: read and decode in cache-sized pieces (`READ_BYTES`), keep the Arrow batches per
table, and append them as one Arrow table (`pa.concat_tables`: no copy) once `FLUSH_ROWS`
rows have gathered, so each INSERT is a big parallel scan. Peak memory stays bounded by
FLUSH_ROWS rows per table, whatever the file size. Measured by benchmarks/ingest.py.
"""

from __future__ import annotations

import pyarrow as pa

from threadwise.observe.records import RecordReader
from threadwise.observe.store import EVENT_TABLES, CaptureWriter

READ_BYTES = 8 << 20         # per file and read: 8 MB (0.22 s of CPU for 10M records, 1.9 s at 256 MB)
FLUSH_ROWS = 4_000_000       # rows per table gathered before one INSERT (~150 MB of switches)


def ingest_records(reader: RecordReader, writer: CaptureWriter, *, read_bytes: int = READ_BYTES,
                   flush_rows: int = FLUSH_ROWS) -> int:
    """Append every whole record `reader` has not read yet; returns the events appended.

    The writer is checkpointed once at the end (DESIGN.md: a short WAL), not per batch.
    """
    pending: dict[str, list[pa.Table]] = {}
    rows: dict[str, int] = {}
    events = 0

    def flush(table: str) -> None:
        batches = pending.pop(table, [])
        rows.pop(table, None)
        if batches:
            writer.append(table, batches[0] if len(batches) == 1 else pa.concat_tables(batches))

    while parts := reader.read(max_bytes=read_bytes):
        for table, batches in parts.items():
            pending.setdefault(table, []).extend(batches)
            added = sum(batch.num_rows for batch in batches)
            rows[table] = rows.get(table, 0) + added
            if table in EVENT_TABLES:
                events += added
            if rows[table] >= flush_rows:
                flush(table)
    for table in list(pending):
        flush(table)
    writer.checkpoint()
    return events
