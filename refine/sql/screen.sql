-- screen.sql: what REPORT.md reads of a training's screen, its null arm and its lab minutes
-- (refine/search/screen_report.py). Ladder schema 7; a file older than schema 6 has no screen rows.

-- name: screen_rows
-- Every candidate of the screen, ranked ones first by rank, then the refused ones.
-- Columns: run_id INTEGER, the screen's run; arm VARCHAR (NULL: refused); candidate VARCHAR;
--          description VARCHAR; reserve_cores INTEGER; rejected VARCHAR ('stage: reason');
--          loss DOUBLE, gain DOUBLE (A/A units); screen_rank INTEGER; chosen BOOLEAN
-- Parameters: none
SELECT run_id, arm, candidate, description, reserve_cores, rejected, loss, gain, screen_rank, chosen
FROM screen
ORDER BY screen_rank IS NULL, screen_rank, candidate;

-- name: rank_rule
-- The rule the screen was ranked by (search/screen.py RANK_RULES; one per screen).
-- Columns: rank_rule VARCHAR
-- Parameters: none
SELECT DISTINCT rank_rule FROM screen WHERE screen_rank IS NOT NULL;

-- name: chosen
-- The candidate the screen chose for step 0 to confirm.
-- Columns: candidate VARCHAR ('start' or a mutation's name)
-- Parameters: none
SELECT candidate FROM screen WHERE chosen;

-- name: step0_run
-- The ladder run of step 0 (the start's confirmation against the default scheduler).
-- Columns: run_id INTEGER (NULL: not measured)
-- Parameters: none
SELECT run_id FROM step WHERE step = 0;

-- name: arm_repeats
-- How many repeats an arm of a run measured (a training's null arm runs fewer than the run's).
-- Columns: repeats BIGINT
-- Parameters: ? INTEGER run_id; ? VARCHAR arm
SELECT count(DISTINCT repeat) FROM cell WHERE run_id = ? AND arm = ?;

-- name: run_minutes
-- Each run's purpose, wall time and what its cells and attaches took of it.
-- Columns: run_id INTEGER; purpose VARCHAR; wall_s DOUBLE (NULL: measured before schema 6);
--          cells INTEGER; window_s DOUBLE, the cells' measured windows and warm-ups, seconds;
--          attach_s DOUBLE, the profile arms' attaches (each arm's last turn's time x the repeats
--          it ran), seconds
-- Parameters: none
SELECT r.run_id, r.purpose, r.wall_s,
       (SELECT count(*) FROM cell c WHERE c.run_id = r.run_id) AS cells,
       (SELECT coalesce(sum(c.wall_s), 0) + count(*) * r.warmup_s FROM cell c WHERE c.run_id = r.run_id)
           AS window_s,
       (SELECT coalesce(sum(a.attach_s * (SELECT count(DISTINCT c.repeat) FROM cell c
                                          WHERE c.run_id = a.run_id AND c.arm = a.arm)), 0)
        FROM arm a WHERE a.run_id = r.run_id) AS attach_s
FROM run r
ORDER BY r.run_id;
