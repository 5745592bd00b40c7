-- wake_sources.sql: what woke each target thread (the waker's context, schema migration 7).
--
-- sched_waking runs in the waker's context. A thread woken by another thread of its workload
-- shows a wake chain; a thread woken from the network shows none: on loopback the request's
-- softirq runs on the sending client's thread, on a NIC on whatever ran (docs/analyze.md,
-- "Woken by requests"). So each wakeup is put in one class by its context and by who was on the
-- CPU: a thread of the workload (task context, a target thread), a thread of another process
-- (task context; kernel threads included), the idle task (task context, nobody ran), a softirq,
-- a hard interrupt (an NMI counted with them). A wakeup whose context the capture did not
-- record (migration 7 or later, and an imported trace, leave it NULL) is in no class:
-- `known` says how many were classed. First wakeups of new threads are left out, as in
-- thread_features.sql.
-- Parameters: none.
-- Columns:
--   utid BIGINT              the woken target thread
--   known BIGINT             wakeups with a recorded context
--   from_own BIGINT          woken by a thread of the workload (is_target), in task context
--   from_other BIGINT        woken by a thread of another process, in task context
--   from_idle BIGINT         woken by the idle task in task context
--   from_softirq BIGINT      woken inside a softirq (whatever thread it ran on)
--   from_hardirq BIGINT      woken inside a hard interrupt (timers, devices) or an NMI
--   request_source VARCHAR   the process most often on the CPU when a softirq or another
--                            process's thread woke it (NULL: none did); '(idle)' for the idle task
WITH _targets AS (
    SELECT utid FROM thread WHERE is_target
), _classed AS (
    SELECT w.wakee_utid AS utid, w.current_utid,
           CASE
               WHEN w.context IS NULL THEN NULL
               WHEN w.context IN ('hardirq', 'nmi') THEN 'hardirq'
               WHEN w.context = 'softirq' THEN 'softirq'
               WHEN w.waker_utid IS NULL THEN 'idle'
               WHEN COALESCE(r.is_target, FALSE) THEN 'own'
               ELSE 'other'
           END AS source
    FROM wakeup w
    LEFT JOIN thread r ON r.utid = w.waker_utid
    WHERE NOT w.is_new AND w.wakee_utid IN (SELECT utid FROM _targets)
), _counts AS (
    SELECT utid, count(source) AS known,
           count(*) FILTER (WHERE source = 'own') AS from_own,
           count(*) FILTER (WHERE source = 'other') AS from_other,
           count(*) FILTER (WHERE source = 'idle') AS from_idle,
           count(*) FILTER (WHERE source = 'softirq') AS from_softirq,
           count(*) FILTER (WHERE source = 'hardirq') AS from_hardirq
    FROM _classed GROUP BY utid
), _on_cpu AS (
    -- who ran when a request-like wakeup came: softirq or another process's thread
    SELECT c.utid, CASE WHEN c.current_utid = 0 THEN '(idle)'
                        ELSE COALESCE(p.name, t.name, '?') END AS process, count(*) AS n
    FROM _classed c
    LEFT JOIN thread t ON t.utid = c.current_utid
    LEFT JOIN process p ON p.upid = t.upid
    WHERE c.source IN ('softirq', 'other')
    GROUP BY ALL
), _top AS (
    -- ties go to the name that sorts first, so one capture always says the same
    SELECT utid, process, row_number() OVER (PARTITION BY utid ORDER BY n DESC, process) AS k
    FROM _on_cpu
)
SELECT c.utid, c.known::BIGINT AS known, c.from_own::BIGINT AS from_own,
       c.from_other::BIGINT AS from_other, c.from_idle::BIGINT AS from_idle,
       c.from_softirq::BIGINT AS from_softirq, c.from_hardirq::BIGINT AS from_hardirq,
       o.process AS request_source
FROM _counts c
LEFT JOIN _top o ON o.utid = c.utid AND o.k = 1
ORDER BY c.utid;
