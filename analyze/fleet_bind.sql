-- fleet_bind.sql: how the DuckDB engine sees a fleet's Parquet files (fleet_engine.py).
-- DuckDB's Python reader cannot be told to read hive partition values as text (it would read a
-- host named 2024 as a number, and 007 as 7), so the partition comes from each file's path.

-- name: partitioned
-- {table}: the rows of {raw} (a capture table's files, read with their file names) with the
-- partition's host and capture as text, as Spark reads them with type inference off.
-- Columns: host, capture VARCHAR; then the table's own columns
CREATE OR REPLACE TEMP VIEW {table} AS
SELECT regexp_extract(filename, '/host=([^/]*)/capture=[^/]*/[^/]*$', 1) AS host,
       regexp_extract(filename, '/capture=([^/]*)/[^/]*$', 1) AS capture,
       * EXCLUDE (filename)
FROM {raw};
