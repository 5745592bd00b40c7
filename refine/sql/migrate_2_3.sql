-- migrate_2_3.sql: a schema-2 ladder file brought to schema 3 (store.open_ladder runs it).
-- Adds why the guided search chose a step's candidate and the blocker table (created by
-- ladder.sql itself). Old steps keep NULL: they were chosen in registry order.
ALTER TABLE step ADD COLUMN IF NOT EXISTS chosen_because VARCHAR;
UPDATE ladder_meta SET schema_version = 3;
