-- A session's latest checkpoint is found by its seq without reading the
-- others (LatestCheckpoint, before each checkpoint is recorded), as on
-- SQLite (migration 0021 there).
CREATE INDEX checkpoints_by_seq ON checkpoints (session_id, seq);
