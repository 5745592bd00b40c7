-- lint_capture.sql: what placement lint reads from a capture besides analyze's
-- per-thread features (threadwise.analyze.capture_threads): on-CPU slices of
-- the target's threads, and which CPUs are SMT siblings of one core.

-- name: target_slices
-- On-CPU slices of the target's threads, [ts, end_ts) on cpu, in cpu then time order.
-- Parameters: none.
-- Columns:
--   cpu INTEGER      logical CPU
--   ts BIGINT        slice start, ns (monotonic)
--   end_ts BIGINT    slice end, ns (ts + dur)
--   utid BIGINT      thread (thread.utid)
SELECT s.cpu, s.ts, s.ts + s.dur AS end_ts, s.utid
FROM sched_slice s JOIN thread t ON t.utid = s.utid
WHERE t.is_target AND s.dur > 0
ORDER BY s.cpu, s.ts;

-- name: siblings
-- The SMT siblings of every online CPU (its own id included), one row per CPU.
-- Parameters: none.
-- Columns:
--   cpu INTEGER               logical CPU
--   smt_siblings INTEGER[]    the CPUs of its core (cpu_topology.smt_siblings)
SELECT cpu, smt_siblings FROM cpu_topology WHERE online ORDER BY cpu;
