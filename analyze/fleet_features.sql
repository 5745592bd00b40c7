-- fleet_features.sql: per-thread, per-capture and per-host features of a fleet's captures (fleet.py).
--
-- Written once, in DuckDB's dialect; the Spark engine runs the same statements transpiled by
-- SQLGlot (fleet_engine.py), so nothing here may lean on what only DuckDB has (no ASOF joins,
-- no lists, no $parameters: the percentiles are written as WITHIN GROUP aggregates, which both
-- dialects read alike). Each statement's result becomes a view named after it, read by the next.
-- Inputs, bound by the engine to the captures' Parquet files (observe/interop/parquet.py):
--   sched_slice  host, capture VARCHAR (the hive partition) + the capture's sched_slice columns
--   thread_wait  host, capture VARCHAR + the capture's thread_wait columns
--   capture      the captures' `capture` rows (capture_id = the partition's capture)
--   fleet_group  host, capture VARCHAR, utid BIGINT, pattern VARCHAR: each grouped thread's group
-- Integers stay integers (both engines' sums of BIGINT are cast back to BIGINT), so the two
-- engines agree exactly on every count, sum and discrete percentile; the ratios are doubles
-- computed from those integers.

-- name: thread_capture
-- One row per grouped thread of a capture (utid 0, the idle tasks, excluded), inside the
-- capture's window (slices clipped at its end, as thread_features.sql clips them).
-- Columns:
--   host, capture VARCHAR; utid BIGINT; pattern VARCHAR   who, and its group
--   window_ns BIGINT        the capture's window (end_ts - start_ts)
--   slices BIGINT           on-CPU slices
--   cpu_ns BIGINT           CPU time
--   involuntary BIGINT      slices that ended runnable (R, R+)
--   wait_ns BIGINT          run-queue time: after a preemption, or from its wakeup to its next slice
WITH win AS (
    SELECT capture_id AS capture, start_ts, COALESCE(end_ts, start_ts) AS end_ts FROM capture
), runs AS (
    SELECT s.host, s.capture, s.utid, count(*) AS slices,
           CAST(sum(LEAST(s.dur, w.end_ts - s.ts)) AS BIGINT) AS cpu_ns,
           count(*) FILTER (WHERE CAST(s.end_state AS VARCHAR) IN ('R', 'R+')) AS involuntary
    FROM sched_slice s JOIN win w ON w.capture = s.capture
    WHERE s.utid <> 0 AND s.ts < w.end_ts
    GROUP BY s.host, s.capture, s.utid
), queued AS (
    SELECT q.host, q.capture, q.utid,
           CAST(sum(LEAST(q.end_ts, w.end_ts) - q.runnable_ts) AS BIGINT) AS wait_ns
    FROM (SELECT host, capture, utid, end_ts,
                 CASE WHEN CAST(end_state AS VARCHAR) IN ('R', 'R+') THEN ts ELSE wake_ts END AS runnable_ts
          FROM thread_wait) q
    JOIN win w ON w.capture = q.capture
    WHERE q.runnable_ts IS NOT NULL AND q.runnable_ts < w.end_ts
    GROUP BY q.host, q.capture, q.utid
)
SELECT g.host, g.capture, g.utid, g.pattern, w.end_ts - w.start_ts AS window_ns,
       COALESCE(r.slices, 0) AS slices, COALESCE(r.cpu_ns, 0) AS cpu_ns,
       COALESCE(r.involuntary, 0) AS involuntary, COALESCE(q.wait_ns, 0) AS wait_ns
FROM fleet_group g
JOIN win w ON w.capture = g.capture
LEFT JOIN runs r ON r.host = g.host AND r.capture = g.capture AND r.utid = g.utid
LEFT JOIN queued q ON q.host = g.host AND q.capture = g.capture AND q.utid = g.utid;

-- name: group_capture
-- One row per group of a capture: what analyze's group row says, recomputed from the slices.
-- Columns:
--   host, capture, pattern VARCHAR
--   threads BIGINT            grouped threads
--   cpu_ns BIGINT             the group's CPU time
--   cpu_share DOUBLE          cpu_ns / window, in CPUs (analyze's group cpu_share)
--   max_thread_share DOUBLE   its busiest thread's CPU time / window
--   demand DOUBLE             (CPU + run-queue time) / window, in CPUs
--   involuntary_frac DOUBLE   share of its slices that ended runnable
--   slice_p50_ns, slice_p90_ns BIGINT   its slices' lengths (discrete percentiles)
WITH sums AS (
    SELECT host, capture, pattern, count(*) AS threads,
           CAST(sum(cpu_ns) AS BIGINT) AS cpu_ns, CAST(sum(wait_ns) AS BIGINT) AS wait_ns,
           CAST(sum(slices) AS BIGINT) AS slices, CAST(sum(involuntary) AS BIGINT) AS involuntary,
           max(cpu_ns) AS max_thread_ns, max(window_ns) AS window_ns
    FROM thread_capture GROUP BY host, capture, pattern
), lengths AS (
    SELECT g.host, g.capture, g.pattern,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY s.dur) AS slice_p50_ns,
           percentile_disc(0.9) WITHIN GROUP (ORDER BY s.dur) AS slice_p90_ns
    FROM sched_slice s
    JOIN fleet_group g ON g.host = s.host AND g.capture = s.capture AND g.utid = s.utid
    GROUP BY g.host, g.capture, g.pattern
)
SELECT s.host, s.capture, s.pattern, s.threads, s.cpu_ns,
       s.cpu_ns / CAST(NULLIF(s.window_ns, 0) AS DOUBLE) AS cpu_share,
       s.max_thread_ns / CAST(NULLIF(s.window_ns, 0) AS DOUBLE) AS max_thread_share,
       (s.cpu_ns + s.wait_ns) / CAST(NULLIF(s.window_ns, 0) AS DOUBLE) AS demand,
       s.involuntary / CAST(NULLIF(s.slices, 0) AS DOUBLE) AS involuntary_frac,
       CAST(l.slice_p50_ns AS BIGINT) AS slice_p50_ns, CAST(l.slice_p90_ns AS BIGINT) AS slice_p90_ns
FROM sums s
LEFT JOIN lengths l ON l.host = s.host AND l.capture = s.capture AND l.pattern = s.pattern;

-- name: group_host
-- One row per group of a host: its captures' figures, summarised (fleet.py takes the quantile
-- across hosts from these).
-- Columns:
--   host, pattern VARCHAR
--   captures BIGINT               the host's captures that hold the group
--   cpu_ns BIGINT                 CPU time over those captures
--   window_ns BIGINT              their windows, summed
--   cpu_share DOUBLE              cpu_ns / window_ns: the host's share, weighted by capture length
--   cpu_share_max DOUBLE          its busiest capture's share
--   max_thread_share DOUBLE       the busiest thread's share in any of its captures
--   demand DOUBLE                 the largest demand of its captures
--   slice_p90_ns BIGINT           the largest p90 slice of its captures
SELECT g.host, g.pattern, count(*) AS captures, CAST(sum(g.cpu_ns) AS BIGINT) AS cpu_ns,
       CAST(sum(c.window_ns) AS BIGINT) AS window_ns,
       sum(g.cpu_ns) / CAST(NULLIF(sum(c.window_ns), 0) AS DOUBLE) AS cpu_share,
       max(g.cpu_share) AS cpu_share_max, max(g.max_thread_share) AS max_thread_share,
       max(g.demand) AS demand, max(g.slice_p90_ns) AS slice_p90_ns
FROM group_capture g
JOIN (SELECT DISTINCT host, capture, window_ns FROM thread_capture) c
  ON c.host = g.host AND c.capture = g.capture
GROUP BY g.host, g.pattern;
