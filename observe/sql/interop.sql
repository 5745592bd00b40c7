-- interop.sql: what export to Perfetto (interop/export_perfetto.py) reads of a capture,
-- and what import (interop/import_trace.py) asks of the capture it is writing.
-- Times are ns as recorded (`ts`), tids are kernel tids.

-- name: export_limits
-- Keep DuckDB's sort (the time-ordered event stream) within bounded memory: it
-- spills to the temporary directory beyond the limit.
-- Columns: none
SET memory_limit = '1000MB';

-- name: export_capture
-- The capture row: window, loss and origin.
-- Columns:
--   start_ts, end_ts BIGINT       capture window (end_ts = start_ts when never recorded)
--   host, kernel_release VARCHAR
--   events_lost, switch_gaps BIGINT  switch_gaps are recomputed by an importer, so the
--                                    tracer's own part (events_lost - switch_gaps) is exported
--   tracer_backend VARCHAR
SELECT start_ts, COALESCE(end_ts, start_ts) AS end_ts, host, kernel_release,
       COALESCE(events_lost, 0) AS events_lost, COALESCE(switch_gaps, 0) AS switch_gaps,
       tracer_backend
FROM capture LIMIT 1;

-- name: export_cpus
-- Every CPU of the topology, and every CPU an event names (a capture without topology).
-- Columns: cpu INTEGER, ascending
SELECT DISTINCT cpu FROM (SELECT cpu FROM cpu_topology UNION ALL SELECT DISTINCT cpu FROM raw_sched_switch)
ORDER BY cpu;

-- name: export_threads
-- Thread instances (not the idle task) with their process and final name.
-- Columns: tid INTEGER, tgid INTEGER (tid when unknown), name VARCHAR ('' when unknown),
--          start_ts BIGINT (NULL: born before the capture), process_name VARCHAR ('' when unknown),
--          ordered by tid then birth
SELECT tid, COALESCE(tgid, tid) AS tgid, COALESCE(name, '') AS name, start_ts,
       COALESCE(process_name, '') AS process_name
FROM thread WHERE utid <> 0
ORDER BY tid, start_ts NULLS FIRST;

-- name: export_processes
-- Processes (not the idle one) with name and command line.
-- Columns: pid INTEGER, name VARCHAR, cmdline VARCHAR (NULL: unknown)
SELECT pid, COALESCE(name, '') AS name, cmdline FROM process WHERE upid <> 0 ORDER BY pid, start_ts;

-- name: export_sched_stream
-- sched_switch and sched_waking in one time-ordered stream (a switch before a waking at
-- the same ts, so "who runs on the CPU at a waking" is the same question for the
-- exporter and every importer).
-- Columns:
--   ts BIGINT
--   kind TINYINT        0 sched_switch, 1 sched_waking
--   cpu INTEGER         the CPU of the event (for a waking: the waker's)
--   tid_a INTEGER       switch: prev_tid; waking: waker_tid (0: interrupt context or idle)
--   tid_b INTEGER       switch: next_tid; waking: wakee_tid
--   state BIGINT        switch: prev_state; waking: 1 for sched_wakeup_new, else 0
--   prio_a INTEGER      switch: prev_prio; waking: target_cpu
--   prio_b INTEGER      switch: next_prio; waking: 0
--   context SMALLINT    waking: its context (0 task, 1 softirq, 2 hardirq, 3 NMI; migration 7), -1
--                       unknown; switch: -1
--   current INTEGER     waking: the task on the CPU (migration 7), -1 unknown; switch: -1
SELECT ts, 0::TINYINT AS kind, cpu, prev_tid AS tid_a, next_tid AS tid_b, prev_state AS state,
       prev_prio AS prio_a, next_prio AS prio_b, -1::SMALLINT AS context, -1 AS current
FROM raw_sched_switch
UNION ALL
SELECT ts, 1::TINYINT, cpu, waker_tid, wakee_tid, is_new::BIGINT, target_cpu, 0,
       COALESCE(context, -1), COALESCE(current_tid, -1)
FROM raw_sched_waking
ORDER BY ts, kind;

-- name: export_migrations
-- sched_migrate_task, time-ordered.
-- Columns: ts BIGINT, cpu INTEGER, tid INTEGER, orig_cpu INTEGER, dest_cpu INTEGER
SELECT ts, cpu, tid, orig_cpu, dest_cpu FROM raw_sched_migrate ORDER BY ts;

-- name: export_task_events
-- Births, exits and renames in one time-ordered stream (few: read whole).
-- Columns:
--   ts BIGINT, kind VARCHAR ('new' | 'exit' | 'rename'), cpu INTEGER
--   actor INTEGER       new: the parent (the running task); exit, rename: the task
--   tid INTEGER         new: the child; else the task
--   flags UBIGINT       new: clone_flags; exit: tgid; rename: 0
--   comm VARCHAR        new: inherited comm; exit: comm; rename: new comm
--   old_comm VARCHAR    rename: the old comm; else NULL
SELECT ts, 'new' AS kind, cpu, parent_tid AS actor, tid, clone_flags AS flags, comm, NULL AS old_comm
FROM raw_task_new
UNION ALL SELECT ts, 'exit', cpu, tid, tid, tgid::UBIGINT, comm, NULL FROM raw_task_exit
UNION ALL SELECT ts, 'rename', cpu, tid, tid, 0::UBIGINT, new_comm, old_comm FROM raw_task_rename
ORDER BY ts;

-- name: parquet_meta
-- What each Parquet file of an exported capture carries in its metadata (interop/parquet.py).
-- Columns: capture_id VARCHAR, schema_version INTEGER, host, kernel_release VARCHAR,
--   start_wall TIMESTAMP, start_ts, end_ts BIGINT (monotonic ns), nr_cpus BIGINT
SELECT capture_id, schema_version, host, kernel_release, start_wall, start_ts, end_ts,
       (SELECT count(*) FROM cpu_topology) AS nr_cpus
FROM capture LIMIT 1;

-- name: parquet_tables
-- Every table of the capture with the statement that made it (exported one file each).
-- Columns: table_name, sql VARCHAR, by name
SELECT table_name, sql FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name;

-- name: parquet_views
-- Every view of the capture with the statement that made it (carried in the metadata).
-- Columns: view_name, sql VARCHAR, by name
SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY view_name;
