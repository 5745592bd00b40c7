-- evidence.sql: what a training record says about a profile under review (refine/evidence.py:
-- `threadwise validate` and `diff` compare a profile with the arms its record measured).
-- Schema: ladder.sql. Values are bound as `?` parameters, in the order each header lists them.


-- name: profile_arms
-- Every profile arm the file measured, with the profile as measured, by run and arm.
-- Columns: run_id INTEGER, the ladder run; arm VARCHAR, the arm's name ('start', 'best', ...);
--          purpose VARCHAR, the run's purpose ('refine-step-N', 'ladder', ...);
--          profile_toml VARCHAR, the profile TOML the arm compiled and attached
-- Parameters: none
SELECT a.run_id, a.arm, r.purpose, a.profile_toml
FROM arm a JOIN run r USING (run_id)
WHERE a.kind = 'profile' AND a.profile_toml IS NOT NULL
ORDER BY a.run_id, a.arm;

-- name: arm_verdicts
-- The stored verdicts of one arm against a reference arm of its run, per metric and level
-- (as the judge stored them; never recomputed here).
-- Columns: metric VARCHAR; level INTEGER, background spinners;
--          verdict VARCHAR, better | worse | within_noise | insufficient
-- Parameters: ? INTEGER run_id, ? VARCHAR reference arm (the default scheduler's), ? VARCHAR arm
SELECT metric, level, verdict
FROM comparison
WHERE run_id = ? AND reference = ? AND candidate = ?
ORDER BY metric, level;
