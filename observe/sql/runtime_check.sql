-- runtime_check.sql: does the capture's per-thread CPU time agree with the kernel?
--
-- For every target thread with a first /proc snapshot (start, or the scan that
-- found it) and an end snapshot, compare
--   kernel_ns: schedstat sum_exec_runtime(end) - sum_exec_runtime(first)
--   traced_ns: sum of its sched_slice time clipped to [first.ts, end.ts]
-- Both cover the same window, so they should agree up to the clock reads and
-- IRQ time (which the kernel's task runtime may exclude).
WITH first_snap AS (
    SELECT tid,
           MIN(ts)                         AS t0,  -- BIGINT ns, first read
           ARG_MIN(sum_exec_runtime, ts)   AS r0   -- BIGINT ns, kernel runtime then
    FROM proc_snapshot GROUP BY tid
), end_snap AS (
    SELECT tid, ts AS t1, sum_exec_runtime AS r1
    FROM proc_snapshot WHERE phase = 'end'
), window_ AS (
    SELECT f.tid, f.t0, e.t1, e.r1 - f.r0 AS kernel_ns
    FROM first_snap f JOIN end_snap e USING (tid)
    WHERE e.t1 > f.t0
), live AS (
    -- the instance of each tid that was alive at the end (tids are reused)
    SELECT tid, utid, name FROM thread WHERE end_ts IS NULL AND tid <> 0
), preempt_delay AS (
    -- For each slice that ended in preemption: the time from the last wakeup
    -- queued on that CPU to the switch. The kernel charges this time to the
    -- woken thread, the trace to the preempted one (see checks.py).
    SELECT s.utid,
           SUM(s.ts + s.dur - w.ts) AS wake_to_switch_ns  -- BIGINT ns
    FROM sched_slice s
    ASOF JOIN (SELECT ts, target_cpu FROM wakeup) w
        ON w.target_cpu = s.cpu AND w.ts <= s.ts + s.dur
    WHERE s.end_state IN ('R', 'R+') AND w.ts >= s.ts
    GROUP BY s.utid
)
SELECT
    w.tid,
    l.utid,
    l.name,
    w.t1 - w.t0 AS window_ns,          -- BIGINT ns compared
    w.kernel_ns,                       -- BIGINT ns, schedstat delta
    -- (DuckDB's LEAST/GREATEST skip NULLs: count only rows that have a slice)
    COALESCE(SUM(GREATEST(0, LEAST(s.ts + s.dur, w.t1) - GREATEST(s.ts, w.t0)))
             FILTER (WHERE s.ts IS NOT NULL), 0)::BIGINT
        AS traced_ns,                  -- BIGINT ns, from sched_slice
    COUNT(s.ts) AS slices,             -- BIGINT, slices overlapping the window
    COUNT(s.ts) FILTER (WHERE s.end_state IN ('R', 'R+'))
        AS preempted_slices            -- BIGINT, of which ended runnable (preempted)
    , COALESCE(ANY_VALUE(p.wake_to_switch_ns), 0)::BIGINT
        AS wake_to_switch_ns           -- BIGINT ns, preempting wakeup -> switch, summed
FROM window_ w
JOIN live l USING (tid)
LEFT JOIN sched_slice s ON s.utid = l.utid AND s.ts < w.t1 AND s.ts + s.dur > w.t0
LEFT JOIN preempt_delay p ON p.utid = l.utid
GROUP BY w.tid, l.utid, l.name, w.t1, w.t0, w.kernel_ns
ORDER BY w.tid
