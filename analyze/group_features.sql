-- group_features.sql: slice and run-queue latency percentiles per thread group.
--
-- Percentiles of a group cannot be derived from its threads' percentiles, so
-- they are computed over the group's raw slices and waits. The grouping comes
-- from Python as the registered relation `_group_map(utid BIGINT, group_id BIGINT)`.
-- Parameters: none.
-- Columns:
--   group_id BIGINT
--   slice_p50_ns, slice_p99_ns BIGINT           on-CPU slice lengths of the group
--   rq_latency_p50_ns, rq_latency_p99_ns BIGINT run-queue latency of the group
WITH _slices AS (
    SELECT g.group_id, quantile_disc(s.dur, [0.5, 0.99]) AS q
    FROM sched_slice s JOIN _group_map g ON g.utid = s.utid
    GROUP BY g.group_id
), _waits AS (
    SELECT g.group_id, quantile_disc(s.dur, [0.5, 0.99]) AS q
    FROM thread_state s JOIN _group_map g ON g.utid = s.utid
    WHERE s.state IN ('R', 'R+')
    GROUP BY g.group_id
)
SELECT g.group_id,
       s.q[1]::BIGINT AS slice_p50_ns, s.q[2]::BIGINT AS slice_p99_ns,
       w.q[1]::BIGINT AS rq_latency_p50_ns, w.q[2]::BIGINT AS rq_latency_p99_ns
FROM (SELECT DISTINCT group_id FROM _group_map) g
LEFT JOIN _slices s USING (group_id)
LEFT JOIN _waits w USING (group_id)
ORDER BY g.group_id;
