-- cpu_rivals.sql: who a target thread waited behind, and who preempted it.
--
-- A thread that becomes runnable (woken, or preempted) waits until its CPU is
-- handed to it; the thread that ran on that CPU right before is the one it
-- waited behind (an approximation: a wait that spans several slices is charged
-- to the last one). A slice that ends runnable (R+ preempted; R where the tracer
-- does not report the preempt bit) was taken by the next
-- slice on the same CPU. Slices on one CPU are contiguous (finalize.sql: a
-- slice lasts until the CPU's next switch), so "the slice before on this CPU"
-- is an equality join on (cpu, end = start): hash joins run in parallel,
-- where a window PARTITION BY cpu has only as many partitions as CPUs.
-- Parameters: none.
-- Columns:
--   utid BIGINT         the target thread
--   other_utid BIGINT   the rival thread (0 = idle, i.e. nobody)
--   kind VARCHAR        'waited_behind' | 'preempted_by'
--   events BIGINT       how often
--   ns BIGINT           waited_behind: run-queue time charged; preempted_by: CPU time the rival took
WITH _targets AS (
    SELECT utid FROM thread WHERE is_target
), _mine AS (
    SELECT utid, ts, dur, cpu, end_state FROM sched_slice WHERE utid IN (SELECT utid FROM _targets)
), _waits AS (
    SELECT utid, ts + dur AS run_ts, dur
    FROM thread_state
    WHERE state IN ('R', 'R+') AND utid IN (SELECT utid FROM _targets)
)
SELECT s.utid, p.utid AS other_utid, 'waited_behind' AS kind,
       count(*)::BIGINT AS events, sum(w.dur)::BIGINT AS ns
FROM _mine s
JOIN _waits w ON w.utid = s.utid AND w.run_ts = s.ts
JOIN sched_slice p ON p.cpu = s.cpu AND p.ts + p.dur = s.ts AND p.ts < s.ts
GROUP BY ALL
UNION ALL
SELECT s.utid, n.utid, 'preempted_by', count(*)::BIGINT, sum(n.dur)::BIGINT
FROM _mine s
JOIN sched_slice n ON n.cpu = s.cpu AND n.ts = s.ts + s.dur AND n.utid <> s.utid
WHERE s.end_state IN ('R', 'R+')
GROUP BY ALL;
