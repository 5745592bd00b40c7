-- blockers.sql: who held the CPU while a latency group's threads waited (refine/measure/blockers.py).
--
-- Two kinds of statement: `blockers` runs on a capture (observe's schema: sched_slice,
-- thread_wait, thread) built from one traced cell, with the caller's thread -> group map
-- registered as `_thread_group`; `report_rows` reads the ladder file's `blocker`
-- table (schema: ladder.sql). Times in a capture are ns; in the ladder file, seconds.
-- Values are always bound as `?` parameters, in the order each header lists them.


-- name: blockers
-- Per (waiting group, blocker thread name, its group, CPU): how much of the group's waiting the
-- blocker's slices on that CPU overlapped, and in how many waits. A wait is an interval in
-- which a thread of one of the given groups was runnable but not running: from its wakeup
-- (thread_wait.wake_ts, after a sleep) or from the switch that preempted it (end_state R or R+)
-- to the switch that put it back on a CPU; the CPU is that switch's. A sleep whose wakeup was
-- not traced has no known start and is left out. The slices of one CPU tile its time line (the
-- idle task included, utid 0 'swapper'), so a group's rows sum to its total waiting time on
-- the CPUs it was switched in on.
-- Needs: `_thread_group(utid BIGINT, grp VARCHAR)`, the group of each thread in the arm's
--        profile (NULL: catch-all or none), registered by the caller.
-- Columns: waiter_group VARCHAR, the group that waited; blocker VARCHAR, the thread name (comm)
--          of whoever ran meanwhile ('swapper': the CPU was idle); blocker_group VARCHAR (NULL:
--          catch-all / none); cpu INTEGER; wait_ns HUGEINT, overlapped waiting time;
--          waits BIGINT, waits it overlapped
-- Parameters: ? VARCHAR[] the waiting groups (the profile's latency groups)
WITH waits AS (
    SELECT ROW_NUMBER() OVER (ORDER BY w.utid, w.ts) AS wait_id, g.grp AS waiter_group,
           w.utid, COALESCE(w.wake_ts, w.ts) AS start_ts, w.end_ts, s.cpu
    FROM thread_wait w
    JOIN _thread_group g ON g.utid = w.utid
    JOIN sched_slice s ON s.utid = w.utid AND s.ts = w.end_ts
    WHERE list_contains(?, g.grp)
      AND (w.wake_ts IS NOT NULL OR w.end_state IN ('R', 'R+'))
      AND w.end_ts > COALESCE(w.wake_ts, w.ts)
)
SELECT x.waiter_group,
       COALESCE(t.name, 'tid ' || t.tid::VARCHAR) AS blocker,
       bg.grp AS blocker_group,
       x.cpu,
       sum(least(b.ts + b.dur, x.end_ts) - greatest(b.ts, x.start_ts)) AS wait_ns,
       count(DISTINCT x.wait_id) AS waits
FROM waits x
JOIN sched_slice b ON b.cpu = x.cpu AND b.ts < x.end_ts AND b.ts + b.dur > x.start_ts
LEFT JOIN thread t ON t.utid = b.utid
LEFT JOIN _thread_group bg ON bg.utid = b.utid
WHERE b.utid <> x.utid
GROUP BY x.waiter_group, blocker, bg.grp, x.cpu
ORDER BY x.waiter_group, wait_ns DESC, blocker, x.cpu;


-- name: capture_threads
-- Every thread of a capture with its process's name, to map it to a profile group.
-- Columns: utid BIGINT; name VARCHAR, thread comm (NULL: never named); process_name VARCHAR
-- Parameters: none
SELECT utid, name, process_name FROM thread WHERE utid <> 0;


-- name: report_rows
-- The top blockers of each waiting group in each traced cell of the ladder file, with the
-- group's total waiting time in that cell (the sum of its rows).
-- Columns: run_id INTEGER; idx INTEGER, the trace cell; arm VARCHAR; level INTEGER;
--          waiter_group VARCHAR; blocker VARCHAR; blocker_group VARCHAR; cpu INTEGER;
--          wait_s DOUBLE; waits INTEGER; total_s DOUBLE, the group's waiting in the cell
-- Parameters: ? INTEGER how many blockers per group and cell
SELECT run_id, idx, arm, level, waiter_group, blocker, blocker_group, cpu, wait_s, waits, total_s
FROM (
    SELECT *,
           sum(wait_s) OVER (PARTITION BY run_id, idx, waiter_group) AS total_s,
           ROW_NUMBER() OVER (PARTITION BY run_id, idx, waiter_group
                              ORDER BY wait_s DESC, blocker, cpu) AS rank
    FROM blocker
)
WHERE rank <= ?
ORDER BY run_id, idx, waiter_group, rank;
