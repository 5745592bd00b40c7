-- wake_edges.sql: the wake graph, one row per (waker, wakee) thread pair.
--
-- sched_waking runs in the waker's context, so a wakeup from an interrupt
-- (a timer, a NIC) is charged to whichever thread the interrupt landed on;
-- the Python side (wakegraph.py) tells causal edges from such noise. Only
-- edges touching a target thread are kept. Wake-to-run latency comes from
-- thread_state: the runnable interval that follows a sleep carries its waker.
-- Parameters: none.
-- Columns:
--   waker_utid, wakee_utid BIGINT
--   wakeups BIGINT            sched_waking events on this edge (first wakeups of forks excluded)
--   wakee_wakeups BIGINT      all wakeups the wakee received (any waker, interrupts included)
--   latency_runs BIGINT       wake-to-run intervals measured on this edge
--   latency_p50_ns, latency_p99_ns BIGINT   wake-to-run latency
WITH _targets AS (
    SELECT utid FROM thread WHERE is_target
), _counts AS (
    SELECT waker_utid, wakee_utid, count(*) AS wakeups
    FROM wakeup
    WHERE NOT is_new AND waker_utid IS NOT NULL
      AND (waker_utid IN (SELECT utid FROM _targets) OR wakee_utid IN (SELECT utid FROM _targets))
    GROUP BY ALL
), _totals AS (
    SELECT wakee_utid, count(*) AS wakee_wakeups FROM wakeup
    WHERE NOT is_new AND wakee_utid IN (SELECT wakee_utid FROM _counts)
    GROUP BY ALL
), _latency AS (
    SELECT waker_utid, utid AS wakee_utid, count(*) AS latency_runs,
           quantile_disc(dur, [0.5, 0.99]) AS q
    FROM thread_state
    WHERE state = 'R' AND waker_utid IS NOT NULL
      AND (waker_utid IN (SELECT utid FROM _targets) OR utid IN (SELECT utid FROM _targets))
    GROUP BY ALL
)
SELECT c.waker_utid, c.wakee_utid, c.wakeups::BIGINT AS wakeups,
       t.wakee_wakeups::BIGINT AS wakee_wakeups,
       COALESCE(l.latency_runs, 0)::BIGINT AS latency_runs,
       l.q[1]::BIGINT AS latency_p50_ns, l.q[2]::BIGINT AS latency_p99_ns
FROM _counts c
JOIN _totals t USING (wakee_utid)
LEFT JOIN _latency l USING (waker_utid, wakee_utid)
ORDER BY wakeups DESC, waker_utid, wakee_utid;
