-- capture.sql: what the capture orchestration (capture.py) asks of the file
-- it is writing, before and after finalize.sql.

-- name: silent_tasks
-- Tasks that switched in but left no name or tgid in the stream (they never
-- switched out while traced, e.g. the machine agent's threads, see finalize.sql).
-- Columns: tid INTEGER, ascending
SELECT DISTINCT tid FROM (SELECT next_tid AS tid FROM raw_sched_switch
                          UNION SELECT prev_tid FROM raw_sched_switch)
WHERE tid <> 0 AND tid NOT IN (
    SELECT tid FROM raw_task_seen UNION SELECT tid FROM raw_task_new
    UNION SELECT tid FROM proc_snapshot UNION SELECT tid FROM raw_task_exit)
ORDER BY tid;

-- name: switch_span
-- The first and last sched_switch recorded (NULLs when there is none).
-- Columns: first_ts BIGINT, last_ts BIGINT (monotonic ns)
SELECT min(ts) AS first_ts, max(ts) AS last_ts FROM raw_sched_switch;

-- name: final_loss
-- The loss as finalize.sql left it: the tracer's and the kernel counters', plus
-- one per switch-chain gap.
-- Columns: events_lost BIGINT, switch_gaps BIGINT
SELECT events_lost, switch_gaps FROM capture;

-- name: event_span
-- The first and last event of any kind recorded (NULLs when there is none): a recovered
-- capture (recover.py) ends at its last complete event.
-- Columns: first_ts BIGINT, last_ts BIGINT (monotonic ns)
SELECT min(ts) AS first_ts, max(ts) AS last_ts FROM (
    SELECT ts FROM raw_sched_switch UNION ALL SELECT ts FROM raw_sched_waking
    UNION ALL SELECT ts FROM raw_sched_migrate UNION ALL SELECT ts FROM raw_task_new
    UNION ALL SELECT ts FROM raw_task_exit UNION ALL SELECT ts FROM raw_task_rename);

