-- migrations.sql: the numbered schema migrations and their bookkeeping.
--
-- Version 1 is the base schema (schema_v1.sql). Migration N brings a capture
-- from version N - 1 to N; new captures are created through the same steps, so
-- every capture of a version has the same tables whether written new or
-- migrated. store.py lists the migrations (number, description, statement).

-- name: migration_2
-- proc_snapshot.read_ns BIGINT: how long each schedstat read took (ns); the value
-- is from an instant in [ts, ts + read_ns]. NULL in migrated captures: unknown.
ALTER TABLE proc_snapshot ADD COLUMN IF NOT EXISTS read_ns BIGINT;

-- name: migration_3
-- tracer_counts.dropped BIGINT: records of this kind the tracer had no buffer room for,
-- counted exactly per CPU in the kernel (the libbpf tracer). NULL: the tracer cannot count
-- them (bpftrace; migrated captures); then kernel - ingested is the only measure.
ALTER TABLE tracer_counts ADD COLUMN IF NOT EXISTS dropped BIGINT;

-- name: migration_4
-- The CPU limit of the cgroup `observe --cgroup` targeted, read at the end of the capture
-- (a pod's CPU budget; synthesize turns it into request_millicores):
-- capture.cgroup_cpu_quota_us BIGINT   CFS quota per period (us); NULL with a period: no limit
--                                      (cpu.max "max", v1 cfs_quota_us -1)
-- capture.cgroup_cpu_period_us BIGINT  CFS period (us); NULL: not read (not a cgroup target, no
--                                      cpu controller for it, or a migrated capture)
-- capture.cgroup_cpu_source VARCHAR    the file read (cpu.max, or a v1 cpu.cfs_quota_us)
ALTER TABLE capture ADD COLUMN IF NOT EXISTS cgroup_cpu_quota_us BIGINT;
ALTER TABLE capture ADD COLUMN IF NOT EXISTS cgroup_cpu_period_us BIGINT;
ALTER TABLE capture ADD COLUMN IF NOT EXISTS cgroup_cpu_source VARCHAR;

-- name: migration_5
-- Each CPU's steal time (/proc/stat, converted to ns) read beside the proc snapshots: before
-- the start and scan snapshots, after the end one, so any thread's snapshot window lies
-- between two reads. The kernel leaves steal out of task runtime (schedstat) while the trace's
-- clock runs on; the runtime check (runtime_check.sql) allows for it. Empty in migrated
-- captures and in captures of hosts without the column: no steal known.
-- cpu_steal.ts BIGINT        monotonic ns of the read
-- cpu_steal.phase VARCHAR    start | scan | end, as proc_snapshot
-- cpu_steal.cpu INTEGER
-- cpu_steal.steal_ns BIGINT  the counter, in USER_HZ units (10 ms) converted to ns
CREATE TABLE IF NOT EXISTS cpu_steal (
    ts       BIGINT NOT NULL,
    phase    VARCHAR NOT NULL,
    cpu      INTEGER NOT NULL,
    steal_ns BIGINT NOT NULL
);

-- name: migration_6
-- The effective user and group id of each target process (/proc/PID/status `Uid:`/`Gid:`,
-- the second value), read with every snapshot, and carried into the derived `process` table:
-- what scx_layered's UIDEquals/GIDEquals compare (main.bpf.c reads p->real_cred->euid), so
-- analyze can select a forked role by its user where the processes share one comm (nginx's
-- master as root, its workers as www-data; docs/analyze.md "Roles from process titles").
-- proc_snapshot.euid BIGINT   NULL: not read (a migrated capture; a process gone before the read)
-- proc_snapshot.egid BIGINT
-- process.euid, process.egid BIGINT   the last snapshot's; added NULL to an already finalized
--                                     capture (a new capture gets `process` from finalize.sql)
ALTER TABLE proc_snapshot ADD COLUMN IF NOT EXISTS euid BIGINT;
ALTER TABLE proc_snapshot ADD COLUMN IF NOT EXISTS egid BIGINT;
ALTER TABLE IF EXISTS process ADD COLUMN IF NOT EXISTS euid BIGINT;
ALTER TABLE IF EXISTS process ADD COLUMN IF NOT EXISTS egid BIGINT;

-- name: migration_7
-- What woke a thread when no task did (docs/capture.md, docs/analyze.md "Woken by requests"):
-- raw_sched_waking.context SMALLINT    the context the wakeup ran in: 0 task (the idle task
--                                      included), 1 softirq, 2 hard interrupt, 3 NMI
--                                      (tracers/sched.h, enum tw_context); NULL: not recorded (a
--                                      migrated capture, a trace imported from perf or Perfetto)
-- raw_sched_waking.current_tid INTEGER the task on the CPU: the waker in task context, else the
--                                      task the interrupt ran on top of (0: the idle task); NULL:
--                                      not recorded
-- wakeup.context, wakeup.current_utid  the same, keyed by utid (finalize.sql); added NULL to an
--                                      already finalized capture
ALTER TABLE raw_sched_waking ADD COLUMN IF NOT EXISTS context SMALLINT;
ALTER TABLE raw_sched_waking ADD COLUMN IF NOT EXISTS current_tid INTEGER;
ALTER TABLE IF EXISTS wakeup ADD COLUMN IF NOT EXISTS context ENUM('task', 'softirq', 'hardirq', 'nmi');
ALTER TABLE IF EXISTS wakeup ADD COLUMN IF NOT EXISTS current_utid BIGINT;

-- name: migration_8
-- Each target process's title over time (observe/titles.py, docs/capture.md "Process titles"):
-- /proc/PID/cmdline, NULs as spaces, when the capture first read the process and each time a
-- later read (a poll every 0.25 s) found it changed. Servers that fork a process per role say
-- the role only there (`postgres: checkpointer`); the comm stays `postgres`. Empty in migrated
-- captures and in imported traces: no title known over time (process.cmdline still has the last).
-- process_title.ts BIGINT     monotonic ns of the read that found this title
-- process_title.pid INTEGER   the process (tgid)
-- process_title.title VARCHAR the whole cmdline as read (a backend's query state included)
-- process_title.upid BIGINT   the process instance (finalize.sql); NULL: not finalized, unknown
CREATE TABLE IF NOT EXISTS process_title (
    ts    BIGINT NOT NULL,
    pid   INTEGER NOT NULL,
    title VARCHAR NOT NULL,
    upid  BIGINT
);

-- name: record_migration
-- Parameters: ? INTEGER version reached, ? TIMESTAMP applied at (UTC), ? VARCHAR description.
INSERT INTO schema_migrations (version, applied_at, description) VALUES (?, ?, ?);

-- name: set_capture_version
-- Parameters: ? INTEGER the schema version the capture row records.
UPDATE capture SET schema_version = ?;

-- name: schema_version
-- The highest migration applied (NULL: none recorded).
-- Columns: version INTEGER
SELECT max(version) AS version FROM schema_migrations;

-- name: has_table
-- Parameters: ? VARCHAR table name.
-- Columns: found BIGINT, 1 when a table of that name exists, else 0
SELECT count(*) AS found FROM information_schema.tables WHERE table_name = ?;
