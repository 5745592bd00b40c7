-- review.sql: what the review commands (`threadwise diff --capture`) read from a capture
-- (schema: observe/sql/finalize.sql's Perfetto-shaped views). Values are bound as `?`.


-- name: capture_threads
-- Every named thread of the capture (the swapper, utid 0, left out), once per name, process and
-- cgroup: diff places each in both profiles' workloads and layers.
-- Columns: name VARCHAR, the thread's comm (15 characters, as the kernel keeps it);
--          process_name VARCHAR, its process's comm (NULL: the capture does not know it);
--          cgroup VARCHAR, its cgroup v2 path from the capture's /proc snapshots
--          (NULL: not snapshotted, e.g. a thread outside the target)
-- Parameters: none
SELECT DISTINCT name, process_name, cgroup
FROM thread
WHERE utid <> 0 AND name IS NOT NULL
ORDER BY name, process_name, cgroup;
