-- canary.sql: the queries of a canary record (schema: canary_schema.sql).
--
-- Read by refine/canary/record.py. Values are always bound as `?` parameters, in the order each
-- header lists them.

-- name: set_outcome
-- Ends the record: what the canary decided and why.
-- Parameters: ? VARCHAR outcome, ? VARCHAR reason
UPDATE canary SET outcome = ?, reason = ?, ended = now();

-- name: bounds_by_pair
-- The confidence sequence of every metric after every pair, for the summary and its plot.
-- Columns: pair INTEGER; metric VARCHAR; mean DOUBLE, lower DOUBLE, upper DOUBLE (log scale);
--          decision VARCHAR
-- Parameters: none
SELECT pair, metric, mean, lower, upper, decision FROM bound ORDER BY pair, metric;

-- name: window_rows
-- Every window in the order run.
-- Columns: idx INTEGER, pair INTEGER, arm VARCHAR, start_s REAL, end_s REAL, sched_ext VARCHAR,
--          others_cpu_s REAL, host_cpus INTEGER, valid BOOLEAN, note VARCHAR
-- Parameters: none
SELECT idx, pair, arm, start_s, end_s, sched_ext, others_cpu_s, host_cpus, valid, note
FROM canary_window ORDER BY idx;

-- name: insert_meta
-- Stamps a new record with its schema version.
-- Parameters: ? INTEGER schema_version
INSERT INTO canary_meta VALUES (?);

-- name: summary_head
-- What the summary says first: the canary's settings and outcome.
-- Columns: profile_path VARCHAR, target VARCHAR, probe VARCHAR, alpha REAL, window_s REAL,
--          warmup_s REAL, windows_per_visit INTEGER, outcome VARCHAR (NULL: unfinished),
--          reason VARCHAR
-- Parameters: none
SELECT profile_path, target, probe, alpha, window_s, warmup_s, windows_per_visit, outcome, reason
FROM canary;

-- name: last_bounds
-- Each metric's bounds after the last judged pair.
-- Columns: metric VARCHAR; pairs INTEGER; mean DOUBLE, lower DOUBLE, upper DOUBLE (log scale);
--          decision VARCHAR
-- Parameters: none
SELECT metric, pairs, mean, lower, upper, decision
FROM bound
WHERE pair = (SELECT max(pair) FROM bound)
ORDER BY metric;
