-- runtime_check.sql: does the capture's per-thread CPU time agree with the kernel?
--
-- For every target thread with a first /proc snapshot (start, or the scan that
-- found it) and an end snapshot, compare
--   kernel_ns: schedstat sum_exec_runtime(end) - sum_exec_runtime(first)
--   traced_ns: sum of its sched_slice time clipped to [first.ts, end.ts]
-- Both cover the same window, so they should agree up to the clock reads, steal
-- (which the kernel's task runtime excludes, the trace not) and IRQ time (which
-- the kernel's task runtime may exclude).
WITH first_snap AS (
    SELECT tid,
           MIN(ts)                         AS t0,  -- BIGINT ns, first read
           ARG_MIN(sum_exec_runtime, ts)   AS r0,  -- BIGINT ns, kernel runtime then
           ARG_MIN(COALESCE(read_ns, 0), ts) AS u0 -- BIGINT ns, how long that read took
    FROM proc_snapshot GROUP BY tid
), end_snap AS (
    SELECT tid, ts AS t1, sum_exec_runtime AS r1, COALESCE(read_ns, 0) AS u1
    FROM proc_snapshot WHERE phase = 'end'
), window_ AS (
    SELECT f.tid, f.t0, e.t1, e.r1 - f.r0 AS kernel_ns, f.u0 + e.u1 AS read_ns
    FROM first_snap f JOIN end_snap e USING (tid)
    WHERE e.t1 > f.t0
), woken_delay AS (
    -- The other side of the same accounting: a thread whose wakeup preempted the
    -- running one is charged by the kernel from its wakeup on, while the trace
    -- starts its slice at the switch. For each slice that took the CPU from a
    -- preempted thread: the time from this thread's last wakeup to the switch.
    SELECT s.utid, SUM(s.ts - w.ts) AS woken_to_run_ns   -- BIGINT ns
    FROM (SELECT ts, utid,
                 LAG(end_state) OVER (PARTITION BY cpu ORDER BY ts) AS before_state,
                 LAG(ts + dur) OVER (PARTITION BY utid ORDER BY ts) AS own_last_end
          FROM sched_slice) s
    ASOF JOIN (SELECT ts, wakee_utid FROM wakeup) w
        ON w.wakee_utid = s.utid AND w.ts <= s.ts
    -- only a wakeup since the thread last ran made it runnable for this slice
    WHERE s.before_state IN ('R', 'R+') AND (s.own_last_end IS NULL OR w.ts >= s.own_last_end)
    GROUP BY s.utid
), gap_time AS (
    -- a switch-chain gap (finalize.sql) hides when its threads started or stopped
    SELECT tid, SUM(after_ts - before_ts) AS gap_ns FROM (
        SELECT expected_tid AS tid, before_ts, after_ts FROM switch_gap
        UNION ALL SELECT found_tid, before_ts, after_ts FROM switch_gap
    ) GROUP BY tid
), read_lag AS (
    -- /proc/<tid>/schedstat prints se.sum_exec_runtime as last updated: for a
    -- thread on a CPU at the read, that is up to one scheduler tick (10 ms at
    -- HZ=100, the coarsest) behind, never more than its slice so far.
    SELECT w.tid, SUM(LEAST(r.t - s.ts, 10000000)) AS lag_ns
    FROM window_ w
    CROSS JOIN LATERAL (SELECT w.t0 AS t UNION ALL SELECT w.t1) r
    JOIN thread th ON th.tid = w.tid AND th.end_ts IS NULL
    JOIN sched_slice s ON s.utid = th.utid AND s.ts <= r.t AND s.ts + s.dur > r.t
    GROUP BY w.tid
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
), steal_bound AS (
    -- Steal (capture.py reads each CPU's counter before a start/scan snapshot and after the
    -- end one): the kernel leaves it out of task runtime, the trace's clock runs on. The
    -- counter only grows, so the reads bracketing [t0, t1] are the largest at or before t0
    -- and the smallest at or after t1. Upper bound on the steal in between: their difference
    -- plus 10 ms for /proc/stat's USER_HZ units (each read is up to one unit low) plus 10 ms
    -- for the kernel accounting steal at its next tick (HZ=100, the coarsest) while the run-
    -- queue clock leaves it out at once. A CPU whose counter is still 0 never had a unit of
    -- steal (bare metal, or a hypervisor that does not report it): none counted there.
    SELECT w.tid, c.cpu,
           MIN(c.steal_ns) FILTER (WHERE c.ts >= w.t1)
             - MAX(c.steal_ns) FILTER (WHERE c.ts <= w.t0) + 20000000 AS bound_ns,
           MAX(c.steal_ns) AS counter_ns
    FROM window_ w CROSS JOIN cpu_steal c
    GROUP BY w.tid, c.cpu
), on_cpu AS (
    -- each thread's traced time per CPU inside its window
    SELECT w.tid, s.cpu, SUM(LEAST(s.ts + s.dur, w.t1) - GREATEST(s.ts, w.t0)) AS on_ns
    FROM window_ w
    JOIN live l USING (tid)
    JOIN sched_slice s ON s.utid = l.utid AND s.ts < w.t1 AND s.ts + s.dur > w.t0
    GROUP BY w.tid, s.cpu
), steal_time AS (
    -- a thread can have lost to steal only time it was traced on that CPU
    SELECT o.tid, SUM(LEAST(o.on_ns, b.bound_ns)) AS steal_ns
    FROM on_cpu o JOIN steal_bound b ON b.tid = o.tid AND b.cpu = o.cpu
    WHERE b.counter_ns > 0 AND b.bound_ns IS NOT NULL
    GROUP BY o.tid
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
        AS wake_to_switch_ns,          -- BIGINT ns, preempting wakeup -> switch, summed
    COALESCE(ANY_VALUE(d.woken_to_run_ns), 0)::BIGINT
        AS woken_to_run_ns,            -- BIGINT ns, own wakeup -> switch-in after a preemption
    (ANY_VALUE(w.read_ns) + COALESCE(ANY_VALUE(rl.lag_ns), 0))::BIGINT
        AS read_ns,                    -- BIGINT ns, the two reads: their duration + on-CPU lag
    COALESCE(ANY_VALUE(g.gap_ns), 0)::BIGINT
        AS gap_ns,                     -- BIGINT ns, span of switch gaps involving the thread
    COALESCE(ANY_VALUE(st.steal_ns), 0)::BIGINT
        AS steal_ns                    -- BIGINT ns, most steal its traced time can hold (0: none known)
FROM window_ w
JOIN live l USING (tid)
LEFT JOIN sched_slice s ON s.utid = l.utid AND s.ts < w.t1 AND s.ts + s.dur > w.t0
LEFT JOIN preempt_delay p ON p.utid = l.utid
LEFT JOIN woken_delay d ON d.utid = l.utid
LEFT JOIN gap_time g ON g.tid = w.tid
LEFT JOIN read_lag rl ON rl.tid = w.tid
LEFT JOIN steal_time st ON st.tid = w.tid
GROUP BY w.tid, l.utid, l.name, w.t1, w.t0, w.kernel_ns
ORDER BY w.tid
