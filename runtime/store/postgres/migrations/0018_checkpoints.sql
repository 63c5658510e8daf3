-- Checkpoints of sessions' workdirs (docs/workspaces.md), as on SQLite
-- (migration 0017 there): blobs addressed by the SHA-256 of their content,
-- once per session, in compressed chunks; each checkpoint names its
-- manifest blob and the file blobs it keeps. Everything goes with its
-- session.
CREATE TABLE checkpoint_blobs (
	session_id text COLLATE "C" NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	hash       text COLLATE "C" NOT NULL,
	size       bigint NOT NULL,
	stored     bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (session_id, hash)
);

CREATE TABLE checkpoint_chunks (
	session_id text COLLATE "C" NOT NULL,
	hash       text COLLATE "C" NOT NULL,
	n          integer NOT NULL,
	data       bytea   NOT NULL,
	PRIMARY KEY (session_id, hash, n),
	FOREIGN KEY (session_id, hash) REFERENCES checkpoint_blobs (session_id, hash) ON DELETE CASCADE
);

CREATE TABLE checkpoints (
	session_id    text COLLATE "C" NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	checkpoint_id text COLLATE "C" NOT NULL,
	seq           bigint  NOT NULL,
	turn_id       text    NOT NULL DEFAULT '',
	reason        text    NOT NULL,
	tool          text    NOT NULL DEFAULT '',
	call_id       text    NOT NULL DEFAULT '',
	manifest      text COLLATE "C" NOT NULL,
	digest        text    NOT NULL,
	files         integer NOT NULL,
	bytes         bigint  NOT NULL,
	skipped       jsonb   NOT NULL DEFAULT '[]',
	created_at    timestamptz NOT NULL,
	PRIMARY KEY (session_id, checkpoint_id)
);

CREATE TABLE checkpoint_refs (
	session_id    text COLLATE "C" NOT NULL,
	checkpoint_id text COLLATE "C" NOT NULL,
	hash          text COLLATE "C" NOT NULL,
	PRIMARY KEY (session_id, checkpoint_id, hash),
	FOREIGN KEY (session_id, checkpoint_id) REFERENCES checkpoints (session_id, checkpoint_id) ON DELETE CASCADE
);
CREATE INDEX checkpoint_refs_by_hash ON checkpoint_refs (session_id, hash);
