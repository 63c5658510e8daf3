-- The registry records each daemon's trellisd version, as PostgreSQL's
-- does (migration 0016 there): one registry for both stores.
ALTER TABLE daemons ADD COLUMN version TEXT NOT NULL DEFAULT '';
