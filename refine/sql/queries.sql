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

-- name: tables
-- The names of the file's tables (is it a ladder file before anything is written to it?).
-- Columns: table_name VARCHAR
-- Parameters: none
SELECT table_name FROM information_schema.tables;

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
--          stopped_reason VARCHAR, why an incomplete run stopped (NULL: it completed);
--          repeats INTEGER, repeats per arm and level
-- Parameters: ? INTEGER run_id
SELECT workload, primary_metric, primary_direction, secondary, levels, seed, tcg, vcpus,
       completed, stopped_reason, repeats
FROM run WHERE run_id = ?;

-- name: valid_samples
-- Every sample of the run's VALID cells, in execution order (cell idx).
-- Columns: arm VARCHAR, the cell's arm; level INTEGER, background spinners;
--          repeat INTEGER, 1-based (the pairing key with level);
--          metric VARCHAR, the metric's name; value DOUBLE, the sample;
--          denied DOUBLE, share of the vCPUs' demand the host did not serve in the window
--          (NULL: not sampled, e.g. not in the lab)
-- Parameters: ? INTEGER run_id
SELECT c.arm, c.level, c.repeat, s.metric, s.value,
       c.host_wait_s / nullif(c.host_cpu_s + c.host_wait_s, 0) AS denied
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


-- name: comparisons
-- The stored verdicts of one pair of arms on one metric, one row per level, by level.
-- Columns: level INTEGER, background spinners;
--          reference_median DOUBLE, candidate_median DOUBLE, medians of each arm's valid cells
--          (NULL: none); ratio DOUBLE, exp(median paired log ratio);
--          ci_low DOUBLE, ci_high DOUBLE, its 95% interval (NULL: none);
--          verdict VARCHAR, better | worse | within_noise | insufficient;
--          pairs INTEGER, pairs used; pairs_disturbed INTEGER, pairs left out for host load;
--          n_reference INTEGER, n_candidate INTEGER, valid cells of each arm
-- Parameters: ? INTEGER run_id, ? VARCHAR reference arm, ? VARCHAR candidate arm, ? VARCHAR metric
SELECT level, reference_median, candidate_median, ratio, ci_low, ci_high, verdict,
       coalesce(pairs, 0), coalesce(pairs_disturbed, 0), n_reference, n_candidate
FROM comparison
WHERE run_id = ? AND reference = ? AND candidate = ? AND metric = ?
ORDER BY level;

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
--          window_s REAL, warmup_s REAL, seconds; arm_order VARCHAR, 'rotate', 'abba' or 'shuffle';
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

-- name: floors_run
-- The A/A run whose floors the steps' decisions used (else the latest A/A run).
-- Columns: run_id INTEGER (NULL: none)
-- Parameters: none
SELECT coalesce((SELECT max(floors_run) FROM step),
                (SELECT max(run_id) FROM run WHERE purpose = 'aa')) AS run_id;

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


-- name: floors
-- The per-metric A/A floors stored for one A/A run, by metric and n.
-- Columns: metric VARCHAR; level INTEGER (NULL: pooled over levels);
--          n INTEGER, pairs of the comparison a floor applies to;
--          floor DOUBLE, log-ratio margin; aa_pairs INTEGER, the A/A pairs it rests on;
--          method VARCHAR
-- Parameters: ? INTEGER run_id (the A/A run)
SELECT metric, level, n, floor, aa_pairs, method FROM floor WHERE run_id = ?
ORDER BY metric, level NULLS FIRST, n;

-- name: delete_floors
-- Removes an A/A run's floors before they are stored again.
-- Parameters: ? INTEGER run_id
DELETE FROM floor WHERE run_id = ?;


-- name: training
-- The training record's own facts (no row: the file was not written by train).
-- Columns: name VARCHAR; workload VARCHAR; command VARCHAR; profile_path VARCHAR;
--          wall_s DOUBLE, seconds (NULL: unknown); limitations VARCHAR, JSON list
-- Parameters: none
SELECT name, workload, command, profile_path, wall_s, limitations FROM training;

-- name: step_rows
-- Every step with what re-judging it needs, by step.
-- Columns: step INTEGER; run_id INTEGER (NULL: rejected, not measured); candidate VARCHAR;
--          decision VARCHAR; reason VARCHAR
-- Parameters: none
SELECT step, run_id, candidate, decision, reason FROM step ORDER BY step;

-- name: update_step
-- A step re-judged: its decision, reason, floor and floors run.
-- Parameters: ? VARCHAR decision, ? VARCHAR reason, ? DOUBLE noise, ? INTEGER floors_run,
--             ? INTEGER step
UPDATE step SET decision = ?, reason = ?, noise = ?, floors_run = ? WHERE step = ?;

-- name: judged_pairs
-- The (reference, candidate) pairs of arms judged in one run.
-- Columns: reference VARCHAR; candidate VARCHAR
-- Parameters: ? INTEGER run_id
SELECT DISTINCT reference, candidate FROM comparison WHERE run_id = ? ORDER BY reference, candidate;

-- name: aa_runs
-- The runs with two identical baseline arms (an A/A run), by id.
-- Columns: run_id INTEGER
-- Parameters: none
SELECT run_id FROM arm WHERE arm = 'baseline-aa' ORDER BY run_id;

-- name: spinner_only_invalid
-- Profile cells whose only invalidity reason is the background's CPU (schema 1's rule).
-- Columns: run_id INTEGER; idx INTEGER; spinner_cpu_s REAL; wall_s REAL
-- Parameters: none
SELECT c.run_id, c.idx, c.spinner_cpu_s, c.wall_s
FROM cell c JOIN arm a USING (run_id, arm)
WHERE a.kind = 'profile' AND NOT c.valid AND c.reasons LIKE 'spinners:%' AND c.reasons NOT LIKE '%; %';

-- name: make_valid
-- A cell valid by today's rule.
-- Parameters: ? INTEGER run_id, ? INTEGER idx
UPDATE cell SET valid = true, reasons = '' WHERE run_id = ? AND idx = ?;

-- name: host_denied
-- How much of the lab vCPUs' demand the host did not serve during one run's windows.
-- Columns: cells BIGINT, cells with a reading; median_denied DOUBLE; max_denied DOUBLE
--          (NULL: not sampled, e.g. not in the initramfs lab)
-- Parameters: ? INTEGER run_id
SELECT count(host_wait_s) AS cells,
       median(host_wait_s / nullif(host_cpu_s + host_wait_s, 0)) AS median_denied,
       max(host_wait_s / nullif(host_cpu_s + host_wait_s, 0)) AS max_denied
FROM cell WHERE run_id = ?;

-- name: cell_count
-- How many cells a run stored (valid or not).
-- Columns: cells BIGINT
-- Parameters: ? INTEGER run_id
SELECT count(*) AS cells FROM cell WHERE run_id = ?;

-- name: most_pairs
-- The most valid pairs any level of one comparison of a run has for one metric (NULL: none stored).
-- Columns: pairs INTEGER
-- Parameters: ? INTEGER run_id; ? VARCHAR reference arm; ? VARCHAR candidate arm; ? VARCHAR metric
SELECT max(pairs) AS pairs FROM comparison
WHERE run_id = ? AND reference = ? AND candidate = ? AND metric = ?;

-- name: move_profile
-- A training record's profile moved by rejudge's rule (outcome.py: only a winner is a profile).
-- Columns: none
-- Parameters: profile_path VARCHAR, where the profile (or the rejected candidate) now is
UPDATE training SET profile_path = ?;

-- name: cell_repeats
-- Each planned cell of a run and its repeat (benchmarks/early_stop_replay.py: which cells a
-- ladder stopped after repeat k would have measured).
-- Columns: idx INTEGER, the cell's index in the plan; repeat INTEGER, 1-based
-- Parameters: ? INTEGER run_id
SELECT idx, repeat FROM cell WHERE run_id = ? ORDER BY idx;

-- name: step_of_run
-- The search step a ladder run measured.
-- Columns: step INTEGER; candidate VARCHAR, the mutation's name; decision VARCHAR, kept | reverted
-- Parameters: ? INTEGER run_id
SELECT step, candidate, decision FROM step WHERE run_id = ?;

-- name: training_summary
-- A training record's wall time and the profile (or rejected candidate) it wrote, for README's table.
-- Columns: wall_s DOUBLE; profile_path VARCHAR
-- Parameters: none
SELECT wall_s, profile_path FROM training;
