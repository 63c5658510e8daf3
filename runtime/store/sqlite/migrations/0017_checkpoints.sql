-- Checkpoints of sessions' workdirs (docs/workspaces.md), as on
-- PostgreSQL (migration 0018 there): blobs addressed by the SHA-256 of
-- their content, once per session, in compressed chunks; each checkpoint
-- names its manifest blob and the file blobs it keeps. Everything goes
-- with its session. Times in microseconds.
CREATE TABLE checkpoint_blobs (
	session_id TEXT    NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	hash       TEXT    NOT NULL,
	size       INTEGER NOT NULL,
	stored     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (session_id, hash)
);

CREATE TABLE checkpoint_chunks (
	session_id TEXT    NOT NULL,
	hash       TEXT    NOT NULL,
	n          INTEGER NOT NULL,
	data       BLOB    NOT NULL,
	PRIMARY KEY (session_id, hash, n),
	FOREIGN KEY (session_id, hash) REFERENCES checkpoint_blobs (session_id, hash) ON DELETE CASCADE
);

CREATE TABLE checkpoints (
	session_id    TEXT    NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	checkpoint_id TEXT    NOT NULL,
	seq           INTEGER NOT NULL,
	turn_id       TEXT    NOT NULL DEFAULT '',
	reason        TEXT    NOT NULL,
	tool          TEXT    NOT NULL DEFAULT '',
	call_id       TEXT    NOT NULL DEFAULT '',
	manifest      TEXT    NOT NULL,
	digest        TEXT    NOT NULL,
	files         INTEGER NOT NULL,
	bytes         INTEGER NOT NULL,
	skipped       TEXT    NOT NULL DEFAULT '[]',
	created_at    INTEGER NOT NULL,
	PRIMARY KEY (session_id, checkpoint_id)
);

CREATE TABLE checkpoint_refs (
	session_id    TEXT NOT NULL,
	checkpoint_id TEXT NOT NULL,
	hash          TEXT NOT NULL,
	PRIMARY KEY (session_id, checkpoint_id, hash),
	FOREIGN KEY (session_id, checkpoint_id) REFERENCES checkpoints (session_id, checkpoint_id) ON DELETE CASCADE
);
CREATE INDEX checkpoint_refs_by_hash ON checkpoint_refs (session_id, hash);
