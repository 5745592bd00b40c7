-- migrate_6_7.sql: a schema-6 ladder file brought to schema 7 (store.open_ladder runs it).
-- Schema 7 stores with each screen row the rule its screen was ranked by (refine/search/screen.py
-- RANK_RULES): every screen before it ranked by loss, then gain ('loss-then-gain').
ALTER TABLE screen ADD COLUMN IF NOT EXISTS rank_rule VARCHAR DEFAULT 'loss-then-gain';
UPDATE screen SET rank_rule = 'loss-then-gain' WHERE rank_rule IS NULL;
UPDATE ladder_meta SET schema_version = 7;
