-- migrate_1_2.sql: a schema-1 ladder file brought to schema 2 (store.open_ladder runs it).
-- Adds the host's per-cell vCPU times, the paired judge's comparison columns, the floor table
-- (created by ladder.sql itself) and the step's floors run. Old rows keep NULL in the new
-- columns: they were judged by schema 1's bootstrap until re-judged (threadwise rejudge).
ALTER TABLE cell ADD COLUMN IF NOT EXISTS host_cpu_s REAL;
ALTER TABLE cell ADD COLUMN IF NOT EXISTS host_wait_s REAL;
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS pairs INTEGER;
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS pairs_disturbed INTEGER;
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS floor DOUBLE;
ALTER TABLE comparison ADD COLUMN IF NOT EXISTS method VARCHAR;
ALTER TABLE step ADD COLUMN IF NOT EXISTS floors_run INTEGER;
UPDATE ladder_meta SET schema_version = 2;
