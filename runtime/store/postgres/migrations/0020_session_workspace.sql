-- A session's workspace: 'managed' when the daemon made its workdir under
-- its workspace root and rebuilds it from the session's checkpoints on
-- whichever daemon runs it (docs/workspaces.md); '' for a workdir the
-- creator named. As on SQLite (migration 0019 there).
ALTER TABLE sessions ADD COLUMN workspace TEXT NOT NULL DEFAULT '';
