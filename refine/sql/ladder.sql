-- ladder.sql: the schema of a ladder file (one DuckDB file; one or more runs).
--
-- A run measures arms (the default scheduler and profiles) at background
-- levels, repeated, back to back on one machine. Every cell stays in the data,
-- valid or not, with its reasons; statistics read only valid cells' samples.
-- Times are seconds (REAL) here: cells are seconds long, not nanosecond events.
-- Written by refine/ladder.py (ingest of the guest agent's raw files).

CREATE TABLE IF NOT EXISTS ladder_meta (
    schema_version INTEGER NOT NULL        -- 1
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
    arm_order       VARCHAR NOT NULL,      -- 'abba' or 'shuffle'
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
    stopped_reason  VARCHAR                -- where and why an incomplete run stopped
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
    ratio       DOUBLE,                    -- candidate / reference medians
    ci_low      DOUBLE,                    -- bootstrap 95% CI of the ratio
    ci_high     DOUBLE,
    n_reference INTEGER NOT NULL,
    n_candidate INTEGER NOT NULL,
    verdict     VARCHAR NOT NULL           -- better | worse | within_noise | insufficient
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
    noise       DOUBLE NOT NULL,           -- the noise margin the verdicts used
    decision_seed VARCHAR NOT NULL         -- JSON bootstrap seed of the deciding comparison
                                           -- (stats.compare_arms(..., seed=this)): recomputable
);
