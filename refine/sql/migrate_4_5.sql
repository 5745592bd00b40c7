-- migrate_4_5.sql: a schema-4 ladder file brought to schema 5 (store.open_ladder runs it).
-- The judge of schema 5 (stats.py, paired-v3) takes each comparison's noise from the same run's
-- A/A arm at the same level, pooled with the pairs' own residuals: what it was made of is kept
-- with the verdict. Old rows keep NULL until re-judged (threadwise rejudge).
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS noise_sd DOUBLE;
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS noise_df INTEGER;
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS aa_pairs INTEGER;
UPDATE ladder_meta SET schema_version = 5;
