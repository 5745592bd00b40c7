-- search.sql: the guided search's queries of a ladder file (schema: ladder.sql).
--
-- Read by diagnose.py (the failures of a ladder, who blocked whom) and report.py (why each
-- step's candidate was chosen). Values are always bound as `?` parameters, in the order each
-- header lists them.


-- name: comparison_rows
-- Every stored comparison of one run: what the diagnosis reads.
-- Columns: reference VARCHAR, candidate VARCHAR, the arms; metric VARCHAR;
--          level INTEGER, background spinners; ratio DOUBLE, exp(median paired log ratio)
--          (NULL: no pairs); verdict VARCHAR, better | worse | within_noise | insufficient;
--          floor DOUBLE, the interval's half-width, log scale (NULL: none)
-- Parameters: ? INTEGER run_id
SELECT reference, candidate, metric, level, ratio, verdict, floor
FROM comparison
WHERE run_id = ?
ORDER BY reference, candidate, metric, level;

-- name: blocker_rows
-- Who held the CPU while a latency group waited, in one arm's traced cells of one run.
-- Columns: level INTEGER, background spinners; waiter_group VARCHAR, the group that waited;
--          blocker VARCHAR, thread name; blocker_group VARCHAR (NULL: catch-all / none);
--          cpu INTEGER; wait_s DOUBLE, seconds of the wait it overlapped; waits INTEGER
-- Parameters: ? INTEGER run_id, ? VARCHAR arm
SELECT level, waiter_group, blocker, blocker_group, cpu, wait_s, waits
FROM blocker
WHERE run_id = ? AND arm = ?
ORDER BY idx, waiter_group, blocker, cpu;

-- name: steps_chosen
-- The refine loop's decisions, by step, with why the search tried each candidate.
-- Columns: step INTEGER, 0 = the start profile; run_id INTEGER, the measuring run (NULL: none);
--          candidate VARCHAR, mutation name; decision VARCHAR, kept | reverted | rejected;
--          reason VARCHAR, why; chosen_because VARCHAR, the failure it aimed at
--          (NULL: a record older than the guided search)
-- Parameters: none
SELECT step, run_id, candidate, decision, reason, chosen_because FROM step ORDER BY step;

-- name: silent_cells
-- Per level, how many of one arm's windows of one run the service left without a report line
-- (a cell invalid for `load: no output (... from the service)`, metrics.parse_metrics): with the
-- load read from the service's own output, a silent window is its reporting thread starved.
-- Columns: level INTEGER, background spinners; windows INTEGER, the arm's cells at that level;
--          silent INTEGER, those with no report line
-- Parameters: ? INTEGER run_id, ? VARCHAR arm
SELECT level, count(*)::INTEGER AS windows,
       count(*) FILTER (WHERE reasons LIKE '%load: no output (% from the service)%')::INTEGER AS silent
FROM cell
WHERE run_id = ? AND arm = ?
GROUP BY level
ORDER BY level;
