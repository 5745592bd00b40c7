-- ladder.sql: the schema of a ladder file (one DuckDB file; one or more runs).
--
-- A run measures arms (the default scheduler and profiles) at background
-- levels, repeated, back to back on one machine. Every cell stays in the data,
-- valid or not, with its reasons; statistics read only valid cells' samples.
-- Times are seconds (REAL) here: cells are seconds long, not nanosecond events.
-- Written by refine/measure/ladder.py (ingest of the guest agent's raw files).

CREATE TABLE IF NOT EXISTS ladder_meta (
    schema_version INTEGER NOT NULL        -- 7 (store.MIGRATIONS brings older files up to it)
);

CREATE TABLE IF NOT EXISTS run (
    run_id          INTEGER NOT NULL,      -- 1, 2, ... within this file
    started         TIMESTAMP NOT NULL,    -- host wall clock when the run began (UTC)
    command         VARCHAR NOT NULL,      -- the threadwise command line that ran it
    purpose         VARCHAR NOT NULL,      -- 'ladder', 'aa' (noise), 'refine-step-N', 'train'
    workload        VARCHAR NOT NULL,      -- workload name
    workload_toml   VARCHAR NOT NULL,      -- the workload file as read
    primary_metric  VARCHAR NOT NULL,
    primary_direction VARCHAR NOT NULL,    -- 'higher' or 'lower'
    secondary       VARCHAR NOT NULL,      -- JSON list of {metric, direction}
    levels          VARCHAR NOT NULL,      -- JSON list of spinner counts, e.g. [0,1,2,4,8]
    repeats         INTEGER NOT NULL,
    arm_order       VARCHAR NOT NULL,      -- 'rotate', 'abba' or 'shuffle'
    seed            BIGINT NOT NULL,       -- shuffle and bootstrap seed
    window_s        REAL NOT NULL,
    warmup_s        REAL NOT NULL,
    host_kernel     VARCHAR NOT NULL,      -- uname -r of the host
    guest_kernel    VARCHAR,               -- uname -r where the cells ran (NULL: on the host)
    vcpus           INTEGER NOT NULL,      -- CPUs the cells ran on
    tcg             BOOLEAN NOT NULL,      -- cells ran under qemu TCG (software emulation)
    scx_version     VARCHAR NOT NULL,      -- scx_layered version string
    shape           VARCHAR NOT NULL,      -- the machine shape profiles were compiled for
    completed       BOOLEAN NOT NULL,      -- every planned cell finished
    stopped_reason  VARCHAR,               -- where and why an incomplete run stopped
    host_priority   VARCHAR,               -- lab: what it claimed of the host's CPU, a sentence
                                           -- (runtime/lab/hostpriority.py; NULL: on the host, or
                                           -- measured before schema 4, when the lab claimed nothing)
    wall_s          DOUBLE                 -- schema 6: the run's wall time, boot and attaches
                                           -- included (NULL: measured before)
);

CREATE TABLE IF NOT EXISTS arm (
    run_id      INTEGER NOT NULL,
    arm         VARCHAR NOT NULL,          -- 'baseline', or the profile arm's name
    kind        VARCHAR NOT NULL,          -- 'baseline' or 'profile'
    profile_toml VARCHAR,                  -- the profile as measured (NULL for baseline)
    config_json VARCHAR,                   -- the scx_layered config it compiled to
    attach_s    REAL                       -- seconds to attach, last turn (NULL for baseline)
);

CREATE TABLE IF NOT EXISTS cell (
    run_id      INTEGER NOT NULL,
    idx         INTEGER NOT NULL,          -- execution order within the run
    arm         VARCHAR NOT NULL,
    level       INTEGER NOT NULL,          -- background spinners
    repeat      INTEGER NOT NULL,          -- 1-based
    valid       BOOLEAN NOT NULL,
    reasons     VARCHAR NOT NULL,          -- '; '-joined invalidity reasons ('' when valid)
    wall_s      REAL,                      -- measurement window as it happened
    spinner_cpu_s REAL,                    -- CPU the background burned in the window
    generator_cpu_s REAL,                  -- CPU of the load generator in the window
    scx_cpu_s   REAL,                      -- CPU of scx_layered's own process in the window
    service_cpu_s REAL,                    -- CPU of the service process (all threads)
    busy_cpu_s  REAL,                      -- non-idle CPU time of all CPUs in the window
    host_cpu_s  REAL,                      -- lab only: host CPU time the guest's vCPU threads got
                                           -- in the window (runtime/lab/hostload.py; NULL: not sampled)
    host_wait_s REAL,                      -- lab only: time they waited on the host's run queues
    state_before VARCHAR,                  -- sched_ext state and ops at the window's start
    state_after VARCHAR                    -- ... and end
);

CREATE TABLE IF NOT EXISTS sample (
    run_id  INTEGER NOT NULL,
    idx     INTEGER NOT NULL,              -- the cell
    metric  VARCHAR NOT NULL,
    value   DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS membership (
    run_id   INTEGER NOT NULL,
    idx      INTEGER NOT NULL,             -- the cell (profile cells only)
    tid      BIGINT NOT NULL,
    comm     VARCHAR NOT NULL,
    expected_layer VARCHAR,                -- NULL: no name-decidable layer
    actual_layer VARCHAR                   -- NULL: not matched since the attach
);

-- Verdicts as computed when the run was judged (recomputable from sample + cell).
CREATE TABLE IF NOT EXISTS comparison (
    run_id      INTEGER NOT NULL,
    reference   VARCHAR NOT NULL,          -- arm compared against
    candidate   VARCHAR NOT NULL,
    metric      VARCHAR NOT NULL,
    level       INTEGER NOT NULL,
    reference_median DOUBLE,
    candidate_median DOUBLE,
    ratio       DOUBLE,                    -- schema 5: exp(mean of the pairs' log ratios)
                                           -- (schema 2-4: of their median; 1: ratio of medians)
    ci_low      DOUBLE,                    -- the ratio's 95% interval
    ci_high     DOUBLE,
    n_reference INTEGER NOT NULL,          -- valid cells of each arm at this level
    n_candidate INTEGER NOT NULL,
    verdict     VARCHAR NOT NULL,          -- better | worse | within_noise | insufficient
    -- schema 2: the paired judge (stats.py). [ci_low, ci_high] = ratio / exp(floor) .. ratio * exp(floor)
    pairs       INTEGER,                   -- (reference, candidate) cells of one repeat, both valid
    pairs_disturbed INTEGER,               -- pairs left out: the host denied their cells unequally
    floor       DOUBLE,                    -- the interval's half-width, log scale (NULL: none)
    method      VARCHAR,                   -- how: 'paired-v3 ...' (NULL: schema 1's bootstrap)
    -- schema 5: what the noise was made of (NULL: judged before schema 5)
    noise_sd    DOUBLE,                    -- pooled s of one pair's log ratio
    noise_df    INTEGER,                   -- its degrees of freedom: pairs - 1 + aa_pairs
    aa_pairs    INTEGER                    -- the same run's A/A pairs at this level it pooled
);

-- Per-metric noise floors measured in an A/A run (schema 2). Schema 5: the A/A arm's own
-- half-width per level in the run that measured it, for reports (verdicts pool it with each
-- comparison's residuals: comparison.noise_sd). A comparison of n pairs uses the
-- row of its metric and n (level NULL: pooled over levels). Recomputable from that run's
-- sample + cell rows (stats.floors).
CREATE TABLE IF NOT EXISTS floor (
    run_id      INTEGER NOT NULL,          -- the A/A run
    metric      VARCHAR NOT NULL,
    level       INTEGER,                   -- NULL: one floor for every level
    n           INTEGER NOT NULL,          -- pairs in the comparison it applies to
    floor       DOUBLE NOT NULL,           -- margin on the log-ratio scale
    aa_pairs    INTEGER NOT NULL,          -- A/A pairs it rests on
    method      VARCHAR NOT NULL           -- the estimator, e.g. 'null-q95 of median of n, pooled'
);

-- The refine loop's decisions (train and refine).
CREATE TABLE IF NOT EXISTS step (
    step        INTEGER NOT NULL,          -- 0 = the synthesized profile against the baseline
    run_id      INTEGER,                   -- the ladder run that measured it (NULL: not measured)
    candidate   VARCHAR NOT NULL,          -- mutation name
    description VARCHAR NOT NULL,
    decision    VARCHAR NOT NULL,          -- kept | reverted | rejected
    reason      VARCHAR NOT NULL,
    toml_diff   VARCHAR NOT NULL,          -- unified diff against the best before this step
    noise       DOUBLE NOT NULL,           -- the primary metric's floor at the step's repeats
                                           -- (log scale; schema 1: the relative margin)
    decision_seed VARCHAR NOT NULL,        -- JSON seed of the deciding comparison
                                           -- (stats.compare_arms(..., seed=this)): recomputable
    floors_run  INTEGER,                   -- schema 2: the A/A run whose floors it used
    chosen_because VARCHAR                 -- schema 3: why the search tried this candidate now
                                           -- (the failing metric and level it aims at; NULL: step 0
                                           -- or a record older than the guided search)
);

-- Who blocked whom (schema 3): in a traced profile cell, per latency group, what ran on the CPU
-- while that group's threads were runnable and waiting (wakeup -> switched in). One row per
-- (cell, waiting group, blocker thread name, CPU); written by refine/measure/blockers.py from the guest
-- tracer's capture. The search and REPORT.md read the top rows by wait_s.
CREATE TABLE IF NOT EXISTS blocker (
    run_id      INTEGER NOT NULL,
    idx         INTEGER NOT NULL,          -- the traced cell
    arm         VARCHAR NOT NULL,
    level       INTEGER NOT NULL,
    waiter_group VARCHAR NOT NULL,         -- the profile group (layer) whose threads waited
    blocker     VARCHAR NOT NULL,          -- thread name (comm) that held the CPU meanwhile
    blocker_group VARCHAR,                 -- its group in the arm's profile (NULL: catch-all / none)
    cpu         INTEGER NOT NULL,
    wait_s      DOUBLE NOT NULL,           -- waiting time overlapped by the blocker, seconds
    waits       INTEGER NOT NULL           -- waits it overlapped
);

-- What a training wrote (schema 2; one row per file written by `train`): REPORT.md is
-- regenerated from this file alone (report.write_report, threadwise rejudge).
CREATE TABLE IF NOT EXISTS training (
    name        VARCHAR NOT NULL,          -- the profile's name
    workload    VARCHAR NOT NULL,          -- workload name
    command     VARCHAR NOT NULL,          -- the command that trained it
    profile_path VARCHAR NOT NULL,         -- where the profile was written
    wall_s      DOUBLE,                    -- training wall time, seconds (NULL: not known)
    limitations VARCHAR NOT NULL           -- JSON list of sentences for REPORT.md
);

-- The search's screen (schema 6; refine/search/screen.py): candidates measured side by side in one
-- run at few repeats, ranked against the default scheduler; the top one is confirmed by step 0.
-- The screen chooses; no verdict reads it.
CREATE TABLE IF NOT EXISTS screen (
    run_id      INTEGER,                   -- the screen's ladder run (NULL: nothing was measured)
    arm         VARCHAR,                   -- its arm in that run (NULL: refused by vetting)
    candidate   VARCHAR NOT NULL,          -- 'start' or the mutation's name
    description VARCHAR NOT NULL,
    reserve_cores INTEGER NOT NULL,        -- the compile-time reserve it was measured with
    rejected    VARCHAR,                   -- 'stage: reason' when vetting refused it
    loss        DOUBLE,                    -- A/A units its worst metric and level lie beyond one
                                           -- on the bad side (0: no loss beyond noise)
    gain        DOUBLE,                    -- its best primary gain, A/A units
    screen_rank INTEGER,                   -- 1 = the top (NULL: not measured)
    chosen      BOOLEAN NOT NULL,          -- confirmed by the search's step 0
    toml_diff   VARCHAR NOT NULL,          -- unified diff from the start profile
    rank_rule   VARCHAR NOT NULL           -- how the screen ranked (search/screen.py RANK_RULES)
);
