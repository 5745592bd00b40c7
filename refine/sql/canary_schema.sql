-- canary_schema.sql: the schema of a canary record (one DuckDB file per canary run).
--
-- A canary alternates windows on a live service: the profile attached, then the kernel's
-- default scheduler, in ABBA blocks; each pair of windows (one of each, in the same block) is one
-- observation of every objective metric, and the sequential judge (refine/canary/sequence.py)
-- reads its bounds after every pair. Every window stays in the record, with what else ran on the
-- host while it ran. Times are seconds (REAL) since the canary began, or UTC timestamps.
-- Written by refine/canary/record.py.

CREATE TABLE IF NOT EXISTS canary_meta (
    schema_version INTEGER NOT NULL        -- 1
);

CREATE TABLE IF NOT EXISTS canary (
    started         TIMESTAMP NOT NULL,    -- host wall clock when it began (UTC)
    command         VARCHAR NOT NULL,      -- the threadwise command line that ran it
    profile_path    VARCHAR NOT NULL,
    profile_toml    VARCHAR NOT NULL,      -- the profile (or config) as read
    target          VARCHAR NOT NULL,      -- the service, e.g. 'pid 4242 (rolesim)'
    probe           VARCHAR NOT NULL,      -- what the metrics were read from, a sentence
    metrics         VARCHAR NOT NULL,      -- JSON list of {metric, direction, margin, primary}
    alpha           REAL NOT NULL,         -- the chance of any false decision, over all looks
    clip_ratio      REAL NOT NULL,         -- pairs' ratios clipped to [1/clip, clip]
    window_s        REAL NOT NULL,
    warmup_s        REAL NOT NULL,         -- after each switch, before a window counts
    max_duration_s  REAL NOT NULL,
    max_regression  REAL,                  -- one window's primary this much worse: roll back (NULL: off)
    host_kernel     VARCHAR NOT NULL,
    scx_version     VARCHAR NOT NULL,
    windows_per_visit INTEGER NOT NULL,    -- windows per visit of an arm (ABBA over visits)
    outcome         VARCHAR,               -- kept | rolled_back | no_decision | interrupted | failed
    reason          VARCHAR,               -- why, a sentence
    ended           TIMESTAMP              -- NULL while it runs, or when it was killed
);

CREATE TABLE IF NOT EXISTS canary_window (
    idx             INTEGER NOT NULL,      -- 0, 1, ... in the order run
    block           INTEGER NOT NULL,      -- the ABBA block (4 windows, 2 pairs)
    pair            INTEGER NOT NULL,      -- the pair it belongs to (0, 1, ...)
    arm             VARCHAR NOT NULL,      -- 'profile' or 'default'
    start_s         REAL NOT NULL,         -- seconds since the canary began
    end_s           REAL NOT NULL,
    sched_ext       VARCHAR NOT NULL,      -- sysfs state read at the window's end ('enabled', 'disabled')
    others_cpu_s    REAL NOT NULL,         -- CPU seconds other processes used during the window
    host_cpus       INTEGER NOT NULL,      -- online CPUs (others_cpu_s / (window_s * host_cpus): their share)
    valid           BOOLEAN NOT NULL,      -- the window counts (its scheduler was the one planned)
    note            VARCHAR                -- why not, or what the probe said
);

CREATE TABLE IF NOT EXISTS sample (
    window_idx      INTEGER NOT NULL,      -- canary_window.idx
    metric          VARCHAR NOT NULL,
    value           DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS bound (
    pair            INTEGER NOT NULL,      -- after this pair (0-based) was added
    metric          VARCHAR NOT NULL,
    pairs           INTEGER NOT NULL,      -- pairs judged so far
    log_ratio       DOUBLE NOT NULL,       -- this pair's oriented log ratio (positive: better), clipped
    mean            DOUBLE NOT NULL,       -- running mean of the clipped log ratios
    lower           DOUBLE NOT NULL,       -- the confidence sequence's bounds on it (log scale)
    upper           DOUBLE NOT NULL,
    decision        VARCHAR NOT NULL       -- the whole judge's decision after this pair
);
