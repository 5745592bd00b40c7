-- catalog.sql: what schema.py reads back from a scratch database holding the
-- capture schema (schema_v1.sql and every migration), to derive the Arrow
-- schemas of the raw tables from the SQL that declares them.

-- name: table_columns
-- The columns of one table, in declaration order.
-- Parameters: ? VARCHAR table name.
-- Columns: column_name VARCHAR, data_type VARCHAR (DuckDB's type name, e.g. BIGINT)
SELECT column_name, data_type
FROM information_schema.columns
WHERE table_name = ?
ORDER BY ordinal_position;
