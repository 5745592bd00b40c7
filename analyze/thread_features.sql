-- thread_features.sql: one row per thread (utid 0, the idle tasks, excluded).
--
-- Every figure is measured inside the analysis window and the part of it the
-- thread existed in (its life). Parameters: $only_target BOOLEAN (restrict to
-- the target's threads); $start_ts, $end_ts BIGINT, the analysis window: the
-- capture window, ended at the last event when the tracer stopped late
-- (features.py), so a slice clipped to a late capture end does not count
-- minutes nobody observed.
-- Columns:
--   utid BIGINT                thread surrogate id (thread.utid)
--   tid, tgid INTEGER          kernel ids
--   upid BIGINT                process surrogate id
--   name VARCHAR               thread comm (<= 15 chars); '?' when the capture never learnt it
--   process_name VARCHAR       process comm
--   is_target, is_main_thread BOOLEAN
--   life_ns BIGINT             time the thread existed inside the capture window
--   slices BIGINT              on-CPU slices
--   cpu_ns BIGINT              CPU time
--   cpu_share DOUBLE           cpu_ns / life_ns, in CPUs
--   slice_p50_ns, slice_p90_ns, slice_p99_ns BIGINT   on-CPU slice lengths
--   voluntary BIGINT           slices that ended in a sleep (S, D, ...)
--   involuntary BIGINT         slices that ended runnable (preempted R+, or yielded R)
--   cpus_used BIGINT           distinct CPUs it ran on
--   waits BIGINT               runnable intervals (woken or preempted, waiting for a CPU)
--   wait_ns BIGINT             total run-queue time
--   rq_latency_p50_ns, rq_latency_p99_ns, rq_latency_max_ns BIGINT
--   wakeups BIGINT             wakeups received (sched_waking, not first wakeups of forks)
--   wakeups_per_s DOUBLE       wakeups / life
--   wake_interval_cv DOUBLE    how regular its wakeups are (low = periodic, ~1 = random): the
--                              coefficient of variation of the time between its wakeups or of its
--                              sleeps (asleep until woken), whichever is lower (_regularity)
--   wake_gap_cv DOUBLE         the coefficient of variation of the time between its wakeups alone
--                              (the wake graph's pool rule: wakegraph.py)
--   migrations BIGINT, migrations_per_s DOUBLE
--   demand DOUBLE              (cpu_ns + wait_ns) / life_ns: 1.0 = always running or runnable
WITH win AS (
    SELECT $start_ts::BIGINT AS start_ts, $end_ts::BIGINT AS end_ts
), threads AS (
    SELECT t.utid, t.tid, t.tgid, t.upid, COALESCE(t.name, '?') AS name, p.name AS process_name,
           COALESCE(t.is_target, FALSE) AS is_target, COALESCE(t.is_main_thread, FALSE) AS is_main_thread,
           GREATEST(LEAST(COALESCE(t.end_ts, w.end_ts), w.end_ts)
                    - GREATEST(COALESCE(t.start_ts, w.start_ts), w.start_ts), 0) AS life_ns
    FROM thread t
    LEFT JOIN process p USING (upid)
    CROSS JOIN win w
    WHERE t.utid <> 0 AND (COALESCE(t.is_target, FALSE) OR NOT $only_target)
), slices AS (
    SELECT utid, count(*) AS slices, sum(LEAST(dur, $end_ts - ts)) AS cpu_ns,
           quantile_disc(dur, [0.5, 0.9, 0.99]) AS q,
           count(*) FILTER (WHERE end_state NOT IN ('R', 'R+')) AS voluntary,
           count(*) FILTER (WHERE end_state IN ('R', 'R+')) AS involuntary,
           count(DISTINCT cpu) AS cpus_used
    FROM sched_slice WHERE utid IN (SELECT utid FROM threads) AND ts < $end_ts GROUP BY utid
), _off_cpu AS (
    SELECT utid, state, ts, dur FROM thread_state
    WHERE state <> 'Running' AND utid IN (SELECT utid FROM threads) AND ts < $end_ts
), waits AS (
    -- one scan of the off-CPU intervals: run-queue waits, and sleeps for _regularity
    SELECT utid, count(*) FILTER (WHERE state IN ('R', 'R+')) AS waits,
           sum(LEAST(dur, $end_ts - ts)) FILTER (WHERE state IN ('R', 'R+')) AS wait_ns,
           quantile_disc(dur, [0.5, 0.99]) FILTER (WHERE state IN ('R', 'R+')) AS q,
           max(dur) FILTER (WHERE state IN ('R', 'R+')) AS wait_max,
           stddev_pop(dur) FILTER (WHERE state NOT IN ('R', 'R+'))
               / NULLIF(avg(dur) FILTER (WHERE state NOT IN ('R', 'R+')), 0) AS sleep_cv
    FROM _off_cpu GROUP BY utid
), _wake_gaps AS (
    SELECT wakee_utid AS utid, ts - LAG(ts) OVER (PARTITION BY wakee_utid ORDER BY ts) AS gap
    FROM wakeup WHERE NOT is_new AND wakee_utid IN (SELECT utid FROM threads)
), wakes AS (
    SELECT utid, count(*) AS wakeups, stddev_pop(gap) / NULLIF(avg(gap), 0) AS gap_cv
    FROM _wake_gaps GROUP BY utid
), _regularity AS (
    -- A timer's period shows in the gaps between its wakeups (an absolute timer) or in its
    -- sleeps (a relative one: nanosleep, a poll timeout). The gaps alone measured the host: each
    -- also holds the run-queue wait before the thread slept again. rolesim's housekeep
    -- (nanosleep 100 ms) beside a lab VM: gaps of 100-1,098 ms (a 972-ms wait), CV 1.24; its
    -- sleeps 100.0-101.5 ms, CV 0.003 (docs/analyze.md, Periodicity).
    SELECT utid,
           -- rounded: a parallel float aggregate varies in its last bits from run to run
           round(LEAST(k.gap_cv, w.sleep_cv), 6) AS wake_interval_cv,
           round(k.gap_cv, 6) AS wake_gap_cv
    FROM wakes k FULL JOIN waits w USING (utid)
), migs AS (
    SELECT utid, count(*) AS migrations FROM migration
    WHERE utid IN (SELECT utid FROM threads) GROUP BY utid
)
SELECT
    t.utid, t.tid, t.tgid, t.upid, t.name, t.process_name, t.is_target, t.is_main_thread,
    t.life_ns,
    COALESCE(s.slices, 0)::BIGINT AS slices,
    COALESCE(s.cpu_ns, 0)::BIGINT AS cpu_ns,
    COALESCE(s.cpu_ns, 0) / NULLIF(t.life_ns, 0)::DOUBLE AS cpu_share,
    s.q[1]::BIGINT AS slice_p50_ns, s.q[2]::BIGINT AS slice_p90_ns, s.q[3]::BIGINT AS slice_p99_ns,
    COALESCE(s.voluntary, 0)::BIGINT AS voluntary,
    COALESCE(s.involuntary, 0)::BIGINT AS involuntary,
    COALESCE(s.cpus_used, 0)::BIGINT AS cpus_used,
    COALESCE(w.waits, 0)::BIGINT AS waits,
    COALESCE(w.wait_ns, 0)::BIGINT AS wait_ns,
    w.q[1]::BIGINT AS rq_latency_p50_ns, w.q[2]::BIGINT AS rq_latency_p99_ns,
    w.wait_max::BIGINT AS rq_latency_max_ns,
    COALESCE(k.wakeups, 0)::BIGINT AS wakeups,
    COALESCE(k.wakeups, 0) * 1e9 / NULLIF(t.life_ns, 0)::DOUBLE AS wakeups_per_s,
    r.wake_interval_cv::DOUBLE AS wake_interval_cv,
    r.wake_gap_cv::DOUBLE AS wake_gap_cv,
    COALESCE(m.migrations, 0)::BIGINT AS migrations,
    COALESCE(m.migrations, 0) * 1e9 / NULLIF(t.life_ns, 0)::DOUBLE AS migrations_per_s,
    LEAST((COALESCE(s.cpu_ns, 0) + COALESCE(w.wait_ns, 0)) / NULLIF(t.life_ns, 0), 1.0)::DOUBLE AS demand
FROM threads t
LEFT JOIN slices s USING (utid)
LEFT JOIN waits w USING (utid)
LEFT JOIN wakes k USING (utid)
LEFT JOIN _regularity r USING (utid)
LEFT JOIN migs m USING (utid)
ORDER BY cpu_ns DESC, utid;
