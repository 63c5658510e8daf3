-- Per-key limit of concurrently running sessions (key.create maxRunningSessions; 0 = no limit).
ALTER TABLE api_keys ADD COLUMN max_running_sessions INTEGER NOT NULL DEFAULT 0;
