-- capture.sql: what analyze reads of a capture besides the per-thread and group
-- features (features.py: CaptureInfo; api.py: caveats and prefix collisions).

-- name: capture_row
-- The capture's metadata, NULLs replaced (a capture without an end has no duration).
-- Columns:
--   capture_id VARCHAR
--   start_ts, end_ts BIGINT       monotonic ns; end_ts = start_ts when never recorded
--   duration_ns BIGINT            as recorded (0 when NULL)
--   events_recorded, events_lost BIGINT
--   target_tgids BIGINT[]
--   target_spec, end_reason, notes VARCHAR
--   target_kind VARCHAR            pid | comm | cgroup | command (what observe was asked)
--   cgroup_cpu_quota_us, cgroup_cpu_period_us BIGINT   the targeted cgroup's CPU limit
--                                  (quota NULL with a period: no limit; both NULL: not read)
SELECT capture_id, start_ts, COALESCE(end_ts, start_ts) AS end_ts, COALESCE(duration_ns, 0) AS duration_ns,
       COALESCE(events_recorded, 0) AS events_recorded, COALESCE(events_lost, 0) AS events_lost,
       COALESCE(target_tgids, []) AS target_tgids, target_spec, end_reason, notes, target_kind,
       cgroup_cpu_quota_us, cgroup_cpu_period_us
FROM capture LIMIT 1;

-- name: cpus
-- Online CPUs and the largest SMT sibling set among them (1: no SMT).
-- Columns: cpus BIGINT, max_siblings BIGINT
SELECT count(*) AS cpus, COALESCE(max(len(smt_siblings)), 1) AS max_siblings
FROM cpu_topology WHERE online;

-- name: switched_cpus
-- CPUs that ran anything (the CPU count when the topology is missing).
-- Columns: cpus BIGINT
SELECT count(DISTINCT cpu) AS cpus FROM sched_slice;

-- name: target_process
-- The target's process name: the target process that used the most CPU (ties: lowest pid).
-- Columns: name VARCHAR
SELECT p.name
FROM process p
LEFT JOIN thread t ON t.upid = p.upid
LEFT JOIN (SELECT utid, sum(dur) AS ns FROM sched_slice GROUP BY utid) s ON s.utid = t.utid
WHERE p.is_target
GROUP BY p.upid, p.pid, p.name
ORDER BY sum(COALESCE(s.ns, 0)) DESC, p.pid
LIMIT 1;

-- name: last_event
-- The last switch or waking recorded (NULL: none): where a late-stopped capture really ends.
-- Columns: ts BIGINT (monotonic ns)
SELECT max(ts) AS ts FROM (SELECT max(ts) AS ts FROM raw_sched_switch
                           UNION ALL SELECT max(ts) FROM raw_sched_waking);

-- name: other_names
-- Names of threads outside the target (a prefix that selects one of them leaks).
-- Columns: name VARCHAR, distinct, sorted
SELECT DISTINCT name FROM thread
WHERE NOT COALESCE(is_target, FALSE) AND utid <> 0 AND name IS NOT NULL
ORDER BY name;

-- name: reused_tids
-- Target tids that belonged to more than one thread during the capture.
-- Columns: tids BIGINT
SELECT count(*) AS tids FROM (SELECT tid FROM thread WHERE COALESCE(is_target, FALSE)
                              GROUP BY tid HAVING count(*) > 1);

-- name: target_processes
-- The target's processes with what their titles and users say (analyze/titles.py).
-- Columns:
--   upid BIGINT        process surrogate id
--   name VARCHAR       process comm
--   cmdline VARCHAR    /proc/PID/cmdline, NULs as spaces: a process title where the server wrote
--                      one over its argv (`nginx: worker process`): the last title the capture
--                      recorded over time (process_title, migration 8), else the last snapshot's;
--                      NULL: never read
--   euid BIGINT        effective uid (schema migration 6; NULL: not read, an older capture)
WITH last_title AS (
    SELECT upid, arg_max(title, ts) AS title FROM process_title WHERE upid IS NOT NULL GROUP BY upid
)
SELECT p.upid, p.name, COALESCE(t.title, p.cmdline) AS cmdline, p.euid
FROM process p LEFT JOIN last_title t USING (upid)
WHERE p.is_target ORDER BY p.upid;
