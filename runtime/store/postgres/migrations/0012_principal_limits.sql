-- A service principal's limits (principal.create/update agents, workdirs);
-- empty = no limit.
ALTER TABLE principals ADD COLUMN agents text[] NOT NULL DEFAULT '{}';
ALTER TABLE principals ADD COLUMN workdirs text[] NOT NULL DEFAULT '{}';
