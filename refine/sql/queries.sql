-- queries.sql: the refine stage's queries of a ladder file (schema: ladder.sql).
--
-- Read by store.py (opening, run metadata, valid samples), judge.py (storing
-- comparisons) and report.py (REPORT.md). Values are always bound as `?`
-- parameters, in the order each header lists them. Row inserts go through
-- store.insert, whose table and column names come from store._TABLES only.


-- name: meta_rows
-- How many rows ladder_meta holds (0: a file just created, its version not yet written).
-- Columns: n BIGINT, the row count
-- Parameters: none
SELECT count(*) AS n FROM ladder_meta;

-- name: insert_meta
-- Records the ladder schema version of a new file.
-- Parameters: ? INTEGER schema version (store.SCHEMA_VERSION)
INSERT INTO ladder_meta VALUES (?);

-- name: schema_version
-- The file's ladder schema version (fails when ladder_meta is missing: not a ladder file).
-- Columns: schema_version INTEGER, the version the file was written under
-- Parameters: none
SELECT schema_version FROM ladder_meta;


-- name: next_run_id
-- The run_id a new run gets: one more than the largest so far (1 in an empty file).
-- Columns: run_id INTEGER, the next free run id
-- Parameters: none
SELECT coalesce(max(run_id), 0) + 1 AS run_id FROM run;

-- name: run_info
-- One run's metadata (no row: no such run).
-- Columns: workload VARCHAR, workload name;
--          primary_metric VARCHAR; primary_direction VARCHAR, 'higher' or 'lower';
--          secondary VARCHAR, JSON list of {metric, direction};
--          levels VARCHAR, JSON list of background spinner counts;
--          seed BIGINT, shuffle and bootstrap seed;
--          tcg BOOLEAN, cells ran under qemu TCG; vcpus INTEGER, CPUs the cells ran on;
--          completed BOOLEAN, every planned cell finished;
--          stopped_reason VARCHAR, why an incomplete run stopped (NULL: it completed)
-- Parameters: ? INTEGER run_id
SELECT workload, primary_metric, primary_direction, secondary, levels, seed, tcg, vcpus,
       completed, stopped_reason
FROM run WHERE run_id = ?;

-- name: valid_samples
-- Every sample of the run's VALID cells, in execution order (cell idx).
-- Columns: arm VARCHAR, the cell's arm; level INTEGER, background spinners;
--          metric VARCHAR, the metric's name; value DOUBLE, the sample
-- Parameters: ? INTEGER run_id
SELECT c.arm, c.level, s.metric, s.value
FROM cell c JOIN sample s USING (run_id, idx)
WHERE c.run_id = ? AND c.valid
ORDER BY c.idx;

-- name: run_arms
-- The run's arms, in the order they were stored.
-- Columns: arm VARCHAR, the arm's name ('baseline' or a profile arm)
-- Parameters: ? INTEGER run_id
SELECT arm FROM arm WHERE run_id = ?;


-- name: delete_comparison
-- Removes an earlier judgement of the same pair, before the new one is inserted.
-- Parameters: ? INTEGER run_id, ? VARCHAR reference arm, ? VARCHAR candidate arm
DELETE FROM comparison WHERE run_id = ? AND reference = ? AND candidate = ?;


-- name: primary_comparison
-- The stored verdicts of one pair on the primary metric, one row per level, by level.
-- Columns: level INTEGER, background spinners;
--          reference_median DOUBLE, candidate_median DOUBLE, medians of the valid samples
--          (NULL: no samples); ratio DOUBLE, candidate / reference median;
--          ci_low DOUBLE, ci_high DOUBLE, bootstrap 95% CI of the ratio (NULL: none);
--          verdict VARCHAR, better | worse | within_noise | insufficient;
--          n_reference INTEGER, n_candidate INTEGER, valid samples of each arm
-- Parameters: ? INTEGER run_id, ? VARCHAR reference arm, ? VARCHAR candidate arm,
--             ? VARCHAR metric (the run's primary)
SELECT level, reference_median, candidate_median, ratio, ci_low, ci_high, verdict,
       n_reference, n_candidate
FROM comparison
WHERE run_id = ? AND reference = ? AND candidate = ? AND metric = ?
ORDER BY level;

-- name: secondary_comparison
-- The stored verdicts of one pair on a secondary metric, one row per level (any order).
-- Columns: level INTEGER; reference_median DOUBLE; candidate_median DOUBLE; ratio DOUBLE;
--          ci_low DOUBLE; ci_high DOUBLE; verdict VARCHAR (as in primary_comparison)
-- Parameters: ? INTEGER run_id, ? VARCHAR reference arm, ? VARCHAR candidate arm,
--             ? VARCHAR metric (the run's first secondary)
SELECT level, reference_median, candidate_median, ratio, ci_low, ci_high, verdict
FROM comparison
WHERE run_id = ? AND reference = ? AND candidate = ? AND metric = ?;

-- name: background_got
-- The CPU the background spinners actually got, per arm and level > 0 (valid cells only).
-- Columns: arm VARCHAR; level INTEGER, background spinners;
--          cpus REAL, median over the cells of spinner CPU seconds / window seconds
-- Parameters: ? INTEGER run_id
SELECT arm, level, median(spinner_cpu_s / wall_s) AS cpus
FROM cell
WHERE run_id = ? AND valid AND level > 0
GROUP BY arm, level;


-- name: invalid_cells
-- The run's invalid cells with their reasons, in execution order.
-- Columns: idx INTEGER, the cell; arm VARCHAR; level INTEGER, background spinners;
--          repeat INTEGER, 1-based; reasons VARCHAR, '; '-joined invalidity reasons
-- Parameters: ? INTEGER run_id
SELECT idx, arm, level, repeat, reasons
FROM cell
WHERE run_id = ? AND NOT valid
ORDER BY idx;

-- name: environment
-- Where and how one run measured.
-- Columns: host_kernel VARCHAR, uname -r of the host;
--          guest_kernel VARCHAR, uname -r where the cells ran (NULL: on the host);
--          vcpus INTEGER; tcg BOOLEAN; scx_version VARCHAR; shape VARCHAR, the machine shape;
--          levels VARCHAR, JSON list of spinner counts; repeats INTEGER;
--          window_s REAL, warmup_s REAL, seconds; arm_order VARCHAR, 'abba' or 'shuffle';
--          seed BIGINT; started TIMESTAMP, when the run began (UTC)
-- Parameters: ? INTEGER run_id
SELECT host_kernel, guest_kernel, vcpus, tcg, scx_version, shape, levels, repeats,
       window_s, warmup_s, arm_order, seed, started
FROM run WHERE run_id = ?;

-- name: steps
-- The refine loop's decisions, by step.
-- Columns: step INTEGER, 0 = the start profile; run_id INTEGER, the measuring run (NULL: none);
--          candidate VARCHAR, mutation name; decision VARCHAR, kept | reverted | rejected;
--          reason VARCHAR, why
-- Parameters: none
SELECT step, run_id, candidate, decision, reason FROM step ORDER BY step;

-- name: measured_steps
-- The steps that measured a ladder run, by step (the last one holds the final best).
-- Columns: step INTEGER; run_id INTEGER, the measuring run; decision VARCHAR
-- Parameters: none
SELECT step, run_id, decision FROM step WHERE run_id IS NOT NULL ORDER BY step;

-- name: step_diffs
-- Each refinement step's profile change (step 0, the start, has none).
-- Columns: step INTEGER; candidate VARCHAR, mutation name;
--          toml_diff VARCHAR, unified diff against the best before the step
-- Parameters: none
SELECT step, candidate, toml_diff FROM step WHERE step > 0 ORDER BY step;

-- name: noise_floor
-- The largest noise margin any step's verdicts used.
-- Columns: noise DOUBLE, the margin (NULL: no steps)
-- Parameters: none
SELECT max(noise) AS noise FROM step;

-- name: aa_run
-- The latest A/A (noise) run.
-- Columns: run_id INTEGER, its id (NULL: none)
-- Parameters: none
SELECT max(run_id) AS run_id FROM run WHERE purpose = 'aa';

-- name: run_ids
-- Every run in the file, by id.
-- Columns: run_id INTEGER
-- Parameters: none
SELECT run_id FROM run ORDER BY run_id;

-- name: run_summary
-- One run's purpose and arms.
-- Columns: purpose VARCHAR, 'ladder', 'aa', 'refine-step-N', 'train';
--          arms VARCHAR, the run's arm names joined by ', '
-- Parameters: ? INTEGER run_id
SELECT purpose, (SELECT string_agg(arm, ', ') FROM arm a WHERE a.run_id = r.run_id) AS arms
FROM run r WHERE run_id = ?;

-- name: cell_counts
-- How many of one run's cells are valid.
-- Columns: valid BIGINT, valid cells; total BIGINT, all cells
-- Parameters: ? INTEGER run_id
SELECT count(*) FILTER (WHERE valid) AS valid, count(*) AS total FROM cell WHERE run_id = ?;
