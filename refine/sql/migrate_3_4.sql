-- migrate_3_4.sql: a schema-3 ladder file brought to schema 4 (store.open_ladder runs it).
-- Adds what the lab claimed of the host while it measured (runtime/lab/hostpriority.py).
-- Old runs keep NULL: they were measured before the lab claimed anything (as 'off').
ALTER TABLE run ADD COLUMN IF NOT EXISTS host_priority VARCHAR;
UPDATE ladder_meta SET schema_version = 4;
