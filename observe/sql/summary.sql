-- summary.sql: what `threadwise show` prints about a capture (summary.py).

-- name: capture
-- The capture row: what was captured, how, and how much was lost (schema_v1.sql).
-- Columns: capture_id, host, kernel_release VARCHAR; start_wall TIMESTAMP;
--   duration_ns BIGINT; target_kind, target_spec VARCHAR; target_tgids BIGINT[];
--   tracer_backend, tracer_version VARCHAR; events_recorded, events_lost BIGINT;
--   loss_detail, end_reason, notes VARCHAR; schema_version INTEGER; switch_gaps BIGINT
SELECT capture_id, host, kernel_release, start_wall, duration_ns, target_kind, target_spec,
       target_tgids, tracer_backend, tracer_version, events_recorded, events_lost, loss_detail,
       end_reason, notes, schema_version, switch_gaps
FROM capture;

-- name: events_by_kind
-- Rows per raw event table.
-- Columns: kind VARCHAR (switch | waking | migrate | new | exit | rename), events BIGINT
SELECT 'switch' AS kind, count(*) AS events FROM raw_sched_switch
UNION ALL SELECT 'waking', count(*) FROM raw_sched_waking
UNION ALL SELECT 'migrate', count(*) FROM raw_sched_migrate
UNION ALL SELECT 'new', count(*) FROM raw_task_new
UNION ALL SELECT 'exit', count(*) FROM raw_task_exit
UNION ALL SELECT 'rename', count(*) FROM raw_task_rename;

-- name: thread_counts
-- Columns: target BIGINT (threads of the target), seen BIGINT (every thread but idle)
SELECT count(*) FILTER (WHERE is_target) AS target, count(*) FILTER (WHERE utid <> 0) AS seen
FROM thread;

-- name: top_threads
-- CPU time per thread inside the capture window, busiest first.
-- Parameters: ? BOOLEAN only the target's threads; ? INTEGER how many.
-- Columns: utid BIGINT, tid INTEGER, tgid INTEGER, name VARCHAR, process VARCHAR,
--   is_target BOOLEAN, cpu_ns BIGINT (on-CPU time), slices BIGINT
SELECT t.utid, t.tid, t.tgid, t.name, p.name AS process, t.is_target,
       SUM(s.dur) AS cpu_ns,
       COUNT(*) AS slices
FROM sched_slice s
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
WHERE s.utid <> 0 AND (t.is_target OR NOT ?)
GROUP BY ALL
ORDER BY cpu_ns DESC, t.utid
LIMIT ?;

-- name: topology
-- Columns: cpu INTEGER, core INTEGER (dense physical core id), package INTEGER,
--   smt_siblings INTEGER[], llc_id INTEGER
SELECT cpu, core_key AS core, package_id AS package, smt_siblings, llc_id
FROM cpu_topology ORDER BY cpu;
