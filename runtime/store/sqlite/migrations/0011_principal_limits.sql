-- A service principal's limits (principal.create/update agents, workdirs):
-- JSON arrays of strings; [] = no limit.
ALTER TABLE principals ADD COLUMN agents TEXT NOT NULL DEFAULT '[]';
ALTER TABLE principals ADD COLUMN workdirs TEXT NOT NULL DEFAULT '[]';
