-- migrate_5_6.sql: a schema-5 ladder file brought to schema 6 (store.open_ladder runs it).
-- Schema 6 keeps how long each run took (boot and attaches included: a training's report says
-- how its lab minutes were spent) and the search's screen (refine/search/screen.py): every
-- candidate screened side by side in one run, with its score and rank, and which was confirmed.
ALTER TABLE run ADD COLUMN IF NOT EXISTS wall_s DOUBLE;
CREATE TABLE IF NOT EXISTS screen (
    run_id      INTEGER,                   -- the screen's ladder run (NULL: nothing was measured)
    arm         VARCHAR,                   -- its arm in that run (NULL: refused by vetting)
    candidate   VARCHAR NOT NULL,          -- 'start' or the mutation's name
    description VARCHAR NOT NULL,
    reserve_cores INTEGER NOT NULL,        -- the compile-time reserve it was measured with
    rejected    VARCHAR,                   -- 'stage: reason' when vetting refused it
    loss        DOUBLE,                    -- A/A units its worst metric and level lie beyond one
                                           -- on the bad side (0: no loss beyond noise)
    gain        DOUBLE,                    -- its best primary gain, A/A units
    screen_rank INTEGER,                   -- 1 = the top (NULL: not measured)
    chosen      BOOLEAN NOT NULL,          -- confirmed by the search's step 0
    toml_diff   VARCHAR NOT NULL           -- unified diff from the start profile
);
UPDATE ladder_meta SET schema_version = 6;
