-- thread_names.sql: who some threads are, by utid (features.thread_names).
--
-- Parameters: the registered relation _utids(utid BIGINT), the threads asked about.
-- Columns:
--   utid BIGINT            thread surrogate id
--   tid INTEGER            kernel id
--   name VARCHAR           thread comm (NULL: never learnt)
--   process_name VARCHAR   its process's comm
--   upid BIGINT            process surrogate id
--   is_target BOOLEAN
--   cpu_ns BIGINT          CPU time in the capture
--   max_cpu_ns BIGINT      CPU time on its busiest CPU
SELECT t.utid, t.tid, t.name, p.name AS process_name, t.upid,
       COALESCE(t.is_target, FALSE) AS is_target,
       COALESCE(s.cpu_ns, 0)::BIGINT AS cpu_ns, COALESCE(s.max_cpu_ns, 0)::BIGINT AS max_cpu_ns
FROM thread t
JOIN _utids USING (utid)
LEFT JOIN process p USING (upid)
LEFT JOIN (SELECT utid, sum(ns) AS cpu_ns, max(ns) AS max_cpu_ns
           FROM (SELECT utid, cpu, sum(dur) AS ns FROM sched_slice
                 WHERE utid IN (SELECT utid FROM _utids) GROUP BY utid, cpu)
           GROUP BY utid) s USING (utid)
ORDER BY t.utid;
