-- store.sql: a stored analysis (store.py), read back from its analysis file (or, stored by an
-- older threadwise, from inside the capture), and the capture's id it must match.
-- The analysis_* tables themselves are frames written through Arrow; their
-- names come from store.TABLES only.

-- name: has_analysis
-- Columns: found BIGINT, 1 when the capture holds an analysis_meta table
SELECT count(*) AS found FROM information_schema.tables WHERE table_name = 'analysis_meta';

-- name: stored_version
-- Columns: version INTEGER, the analysis schema version stored (NULL: none)
SELECT max(analysis_schema_version) AS version FROM analysis_meta;

-- name: capture_id
-- Columns: capture_id VARCHAR, the capture's random id (observe), which an analysis file records
SELECT capture_id FROM capture LIMIT 1;
