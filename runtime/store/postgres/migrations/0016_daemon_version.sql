-- The registry records each daemon's trellisd version: during a rolling
-- upgrade a call forwarded to an older daemon that does not serve it is
-- refused naming both versions. Additive, so the older daemons still
-- running beside the one that applied it keep working.
ALTER TABLE daemons ADD COLUMN version text NOT NULL DEFAULT '';
