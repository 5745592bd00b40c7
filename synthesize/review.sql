-- review.sql: what the review commands (`threadwise diff --capture`) read from a capture
-- (schema: observe/sql/finalize.sql's Perfetto-shaped views). Values are bound as `?`.


-- name: capture_threads
-- Every named thread of the capture (the swapper, utid 0, left out), once per name, process and
-- cgroup: diff places each in both profiles' workloads and layers.
-- Columns: name VARCHAR, the thread's comm (15 characters, as the kernel keeps it);
--          process_name VARCHAR, its process's comm (NULL: the capture does not know it);
--          cgroup VARCHAR, its cgroup v2 path from the capture's /proc snapshots
--          (NULL: not snapshotted, e.g. a thread outside the target);
--          title VARCHAR, its process's last title (process_title, migration 8, else
--          process.cmdline; NULL: unknown): what a title group selects
-- Parameters: none
WITH last_title AS (
    SELECT upid, arg_max(title, ts) AS title FROM process_title WHERE upid IS NOT NULL GROUP BY upid
)
SELECT DISTINCT t.name, t.process_name, t.cgroup, COALESCE(lt.title, p.cmdline) AS title
FROM thread t LEFT JOIN process p USING (upid) LEFT JOIN last_title lt USING (upid)
WHERE t.utid <> 0 AND t.name IS NOT NULL
ORDER BY t.name, t.process_name, t.cgroup, title;
