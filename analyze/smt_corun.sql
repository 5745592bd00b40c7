-- smt_corun.sql: time a target thread ran while another thread ran on its SMT sibling.
--
-- Two slices co-run for the overlap of their intervals when they sit on
-- sibling CPUs of one core. Only run when the topology has SMT (an interval
-- join per core). Parameters: $min_ns BIGINT (drop pairs below this).
-- Columns:
--   utid BIGINT, other_utid BIGINT   target thread, thread on the sibling
--   corun_ns BIGINT                  total overlap
WITH _pairs AS (
    SELECT cpu, sib FROM (SELECT cpu, unnest(smt_siblings) AS sib FROM cpu_topology) WHERE sib <> cpu
), _a AS (
    SELECT s.utid, s.cpu, s.ts, s.ts + s.dur AS te FROM sched_slice s
    WHERE s.utid IN (SELECT utid FROM thread WHERE is_target)
), _b AS (
    SELECT utid, cpu, ts, ts + dur AS te FROM sched_slice WHERE utid <> 0
)
SELECT a.utid, b.utid AS other_utid, sum(LEAST(a.te, b.te) - GREATEST(a.ts, b.ts))::BIGINT AS corun_ns
FROM _a a
JOIN _pairs p ON p.cpu = a.cpu
JOIN _b b ON b.cpu = p.sib AND b.ts < a.te AND a.ts < b.te
GROUP BY ALL
HAVING sum(LEAST(a.te, b.te) - GREATEST(a.ts, b.ts)) >= $min_ns
ORDER BY corun_ns DESC;
