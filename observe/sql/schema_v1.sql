-- threadwise capture schema, version 1.
-- One capture = one DuckDB file. Times are integer nanoseconds on
-- CLOCK_MONOTONIC (bpftrace's nsecs, Python's time.monotonic_ns), `ts`/`dur`.
-- Raw event tables are plain (no keys, no indexes): bulk appends only, and a
-- CHECKPOINT after each ingest batch (DuckDB WAL replay bugs, see DESIGN.md).
-- Raw tables carry kernel tids; surrogate ids (utid/upid) are assigned once the
-- capture is complete (finalize.sql), because tids are reused.

CREATE TABLE schema_migrations (
    version     INTEGER NOT NULL,   -- schema version reached by this step
    applied_at  TIMESTAMP NOT NULL, -- wall clock when applied
    description VARCHAR NOT NULL
);

-- One row: what was captured, how, and how much was lost.
CREATE TABLE capture (
    capture_id       VARCHAR NOT NULL,  -- random uuid of this capture
    schema_version   INTEGER NOT NULL,
    host             VARCHAR NOT NULL,  -- hostname
    kernel_release   VARCHAR NOT NULL,  -- uname -r
    start_wall       TIMESTAMP NOT NULL,-- wall clock at start (UTC)
    start_ts         BIGINT NOT NULL,   -- monotonic ns when tracing was live
    end_ts           BIGINT,            -- monotonic ns when tracing stopped
    duration_ns      BIGINT,            -- end_ts - start_ts
    target_kind      VARCHAR NOT NULL,  -- pid | comm | cgroup | command
    target_spec      VARCHAR NOT NULL,  -- what the user asked for
    target_tgids     BIGINT[] ,         -- processes that matched (grows with forks)
    tracer_backend   VARCHAR NOT NULL,  -- bpftrace | libbpf
    tracer_version   VARCHAR NOT NULL,
    events_recorded  BIGINT,            -- events ingested into raw tables
    events_lost      BIGINT,            -- events lost: buffer drops + kernel counts not ingested + switch_gaps
    switch_gaps      BIGINT,            -- places where a CPU's switch sequence breaks (>= 1 switch missed each)
    loss_detail      VARCHAR,           -- how events_lost was established
    end_reason       VARCHAR,           -- duration | interrupted | target-exited | tracer-failed
    notes            VARCHAR            -- free text for caveats
);

-- CPU topology from sysfs at capture start.
CREATE TABLE cpu_topology (
    cpu          INTEGER NOT NULL,  -- logical cpu id
    core_id      INTEGER NOT NULL,  -- topology/core_id (unique within a package)
    package_id   INTEGER NOT NULL,  -- topology/physical_package_id
    core_key     INTEGER NOT NULL,  -- dense id of (package_id, core_id): one per physical core
    smt_siblings INTEGER[] NOT NULL,-- topology/thread_siblings_list, including cpu itself
    llc_id       INTEGER NOT NULL,  -- id of the last-level cache (cache/index<max>/id)
    llc_cpus     INTEGER[] NOT NULL,-- cpus sharing that LLC
    online       BOOLEAN NOT NULL
);

-- sched:sched_switch, every CPU (other processes included: who held the CPU).
CREATE TABLE raw_sched_switch (
    ts         BIGINT NOT NULL,
    cpu        INTEGER NOT NULL,
    prev_tid   INTEGER NOT NULL,   -- 0 = idle (swapper)
    prev_state BIGINT NOT NULL,    -- kernel prev_state: 0x100 = preempted (R+), 1 S, 2 D, ...
    prev_prio  INTEGER NOT NULL,   -- kernel prio (120 = nice 0 CFS)
    next_tid   INTEGER NOT NULL,
    next_prio  INTEGER NOT NULL
);

-- sched:sched_waking (runs in the waker's context) and sched:sched_wakeup_new.
CREATE TABLE raw_sched_waking (
    ts         BIGINT NOT NULL,
    cpu        INTEGER NOT NULL,   -- cpu the waker ran on
    waker_tid  INTEGER NOT NULL,   -- 0 when woken from idle/interrupt context
    wakee_tid  INTEGER NOT NULL,
    target_cpu INTEGER NOT NULL,   -- cpu the wakee was queued on
    is_new     BOOLEAN NOT NULL    -- true for sched_wakeup_new (first wakeup of a fork)
);

-- sched:sched_migrate_task.
CREATE TABLE raw_sched_migrate (
    ts       BIGINT NOT NULL,
    cpu      INTEGER NOT NULL,
    tid      INTEGER NOT NULL,
    orig_cpu INTEGER NOT NULL,
    dest_cpu INTEGER NOT NULL
);

-- task:task_newtask: a thread or process was created.
CREATE TABLE raw_task_new (
    ts          BIGINT NOT NULL,
    cpu         INTEGER NOT NULL,
    parent_tid  INTEGER NOT NULL,
    parent_tgid INTEGER NOT NULL,
    tid         INTEGER NOT NULL,   -- the new task
    tgid        INTEGER NOT NULL,   -- its process (parent_tgid when CLONE_THREAD)
    clone_flags UBIGINT NOT NULL,
    comm        VARCHAR NOT NULL    -- inherited name at creation
);

-- sched:sched_process_exit.
CREATE TABLE raw_task_exit (
    ts   BIGINT NOT NULL,
    cpu  INTEGER NOT NULL,
    tid  INTEGER NOT NULL,
    tgid INTEGER NOT NULL,
    comm VARCHAR NOT NULL
);

-- task:task_rename (prctl PR_SET_NAME, pthread_setname_np, exec).
CREATE TABLE raw_task_rename (
    ts       BIGINT NOT NULL,
    cpu      INTEGER NOT NULL,
    tid      INTEGER NOT NULL,
    old_comm VARCHAR NOT NULL,
    new_comm VARCHAR NOT NULL
);

-- First time the tracer saw a task switch out: its tgid and comm then.
CREATE TABLE raw_task_seen (
    ts   BIGINT NOT NULL,
    tid  INTEGER NOT NULL,
    tgid INTEGER NOT NULL,
    comm VARCHAR NOT NULL
);

-- /proc snapshots of target threads: at start, periodically, and at end.
-- sum_exec_runtime is the kernel's own accounting (schedstat), the yardstick
-- the capture's runtime is checked against.
CREATE TABLE proc_snapshot (
    ts               BIGINT NOT NULL,   -- monotonic ns of the read
    phase            VARCHAR NOT NULL,  -- start | scan | end
    tid              INTEGER NOT NULL,
    tgid             INTEGER NOT NULL,
    comm             VARCHAR NOT NULL,  -- /proc/<tgid>/task/<tid>/comm (15 chars max)
    process_comm     VARCHAR NOT NULL,  -- /proc/<tgid>/comm
    cmdline          VARCHAR NOT NULL,
    cgroup           VARCHAR NOT NULL,  -- cgroup v2 path
    nice             INTEGER NOT NULL,
    policy           VARCHAR NOT NULL,  -- SCHED_OTHER | SCHED_BATCH | SCHED_IDLE | SCHED_FIFO | SCHED_RR | SCHED_DEADLINE | SCHED_EXT
    rt_priority      INTEGER NOT NULL,
    sum_exec_runtime BIGINT NOT NULL,   -- schedstat field 1, ns
    run_delay        BIGINT NOT NULL,   -- schedstat field 2, ns
    timeslices       BIGINT NOT NULL    -- schedstat field 3
);

-- Loss reports as the tracer gave them (one row per report).
CREATE TABLE raw_lost (
    ts     BIGINT NOT NULL,     -- when the loss was reported (monotonic ns)
    source VARCHAR NOT NULL,    -- e.g. 'bpftrace perf buffer', 'kernel counter mismatch'
    events BIGINT NOT NULL
);

-- Kernel-side event counts (the tracer counts in BPF maps, independent of the
-- text stream): the difference to what was ingested is the loss.
CREATE TABLE tracer_counts (
    event  VARCHAR NOT NULL,    -- switch | waking | migrate | new | exit | rename
    kernel BIGINT NOT NULL,     -- counted in the kernel
    ingested BIGINT NOT NULL    -- rows that reached the raw table
);
