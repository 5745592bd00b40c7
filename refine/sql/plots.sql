-- plots.sql: what the ladder plots read (refine/plots.py: the PNGs of REPORT.md, compare_ladder).
-- Schema: ladder.sql. Values are bound as `?` parameters, in the order each header lists them.
-- Verdicts and intervals are read as the judge stored them, never recomputed.


-- name: verdicts_against
-- The stored verdicts of every arm against one reference arm of a run, per metric and level.
-- Columns: candidate VARCHAR, the arm compared; metric VARCHAR; level INTEGER, background spinners;
--          ratio DOUBLE, the paired ratio candidate / reference (NULL: no pairs);
--          ci_low DOUBLE, ci_high DOUBLE, the 95% interval the verdict used (NULL: none, e.g.
--          an insufficient level); verdict VARCHAR, better | worse | within_noise | insufficient;
--          pairs INTEGER, the pairs it rests on (0: none, or a schema-1 verdict)
-- Parameters: ? INTEGER run_id, ? VARCHAR reference arm
SELECT candidate, metric, level, ratio, ci_low, ci_high, verdict, coalesce(pairs, 0) AS pairs
FROM comparison
WHERE run_id = ? AND reference = ?
ORDER BY candidate, metric, level;

-- name: cells
-- Every cell of a run in execution order, valid or not, with its reasons.
-- Columns: idx INTEGER, execution order; arm VARCHAR; level INTEGER, background spinners;
--          repeat INTEGER, 1-based; valid BOOLEAN; reasons VARCHAR, '; '-joined ('' when valid)
-- Parameters: ? INTEGER run_id
SELECT idx, arm, level, repeat, valid, reasons
FROM cell
WHERE run_id = ?
ORDER BY idx;
