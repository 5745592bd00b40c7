-- cpu_rivals.sql: who a target thread waited behind, and who preempted it.
--
-- A thread that becomes runnable (woken, or preempted) waits until its CPU is
-- handed to it; the thread that ran on that CPU right before is the one it
-- waited behind (an approximation: a wait that spans several slices is charged
-- to the last one). A slice that ends runnable (R+ preempted; R where the tracer
-- does not report the preempt bit) was taken by the next slice on the same CPU.
-- Slices on one CPU are contiguous (finalize.sql: a slice lasts until the
-- CPU's next switch), so every CPU handover is one equality join on
-- (cpu, end = start); hash joins run in parallel, where a window PARTITION BY
-- cpu has only as many partitions as CPUs. The handovers are computed once
-- and read from both sides (the thread coming in, the thread going out).
-- Parameters: none.
-- Columns:
--   utid BIGINT         the target thread
--   other_utid BIGINT   the rival thread (0 = idle, i.e. nobody)
--   kind VARCHAR        'waited_behind' | 'preempted_by'
--   events BIGINT       how often
--   ns BIGINT           waited_behind: run-queue time charged; preempted_by: CPU time the rival took
WITH _targets AS (
    SELECT utid FROM thread WHERE is_target
), _handover AS MATERIALIZED (
    SELECT s.utid AS out_utid, s.end_state AS out_state, n.utid AS in_utid, n.ts AS in_ts, n.dur AS in_dur
    FROM sched_slice s
    JOIN sched_slice n ON n.cpu = s.cpu AND n.ts = s.ts + s.dur AND n.ts > s.ts
    WHERE s.utid IN (SELECT utid FROM _targets) OR n.utid IN (SELECT utid FROM _targets)
), _waits AS (
    SELECT utid, ts + dur AS run_ts, dur
    FROM thread_state
    WHERE state IN ('R', 'R+') AND utid IN (SELECT utid FROM _targets)
)
SELECT h.in_utid AS utid, h.out_utid AS other_utid, 'waited_behind' AS kind,
       count(*)::BIGINT AS events, sum(w.dur)::BIGINT AS ns
FROM _handover h
JOIN _waits w ON w.utid = h.in_utid AND w.run_ts = h.in_ts
GROUP BY ALL
UNION ALL
SELECT out_utid, in_utid, 'preempted_by', count(*)::BIGINT, sum(in_dur)::BIGINT
FROM _handover
WHERE out_utid IN (SELECT utid FROM _targets) AND out_state IN ('R', 'R+') AND in_utid <> out_utid
GROUP BY ALL;
