-- Initial schema. Times are INTEGER microseconds since the Unix epoch (UTC);
-- JSON is TEXT; "" means none for optional strings.

CREATE TABLE sessions (
	session_id        TEXT    PRIMARY KEY,
	workdir           TEXT    NOT NULL,
	mode              TEXT    NOT NULL,
	provider          TEXT    NOT NULL DEFAULT '',
	model             TEXT    NOT NULL DEFAULT '',
	agent             TEXT    NOT NULL DEFAULT '',
	kind              TEXT    NOT NULL,
	parent_session_id TEXT    NOT NULL DEFAULT '',
	job_id            TEXT    NOT NULL DEFAULT '',
	title             TEXT    NOT NULL DEFAULT '',
	last_prompt       TEXT    NOT NULL DEFAULT '',
	created_at        INTEGER NOT NULL,
	last_activity_at  INTEGER,          -- NULL = no activity yet
	closed            INTEGER NOT NULL DEFAULT 0,
	backend           TEXT              -- JSON, NULL = none
);
CREATE INDEX sessions_by_created ON sessions (created_at DESC, session_id DESC);
CREATE INDEX sessions_by_workdir ON sessions (workdir, created_at DESC);

CREATE TABLE events (
	session_id TEXT    NOT NULL REFERENCES sessions (session_id),
	seq        INTEGER NOT NULL,
	kind       TEXT    NOT NULL,
	payload    TEXT    NOT NULL,
	ts         INTEGER NOT NULL,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE history (
	session_id TEXT    NOT NULL REFERENCES sessions (session_id),
	idx        INTEGER NOT NULL,
	message    TEXT    NOT NULL,
	PRIMARY KEY (session_id, idx)
);

CREATE TABLE allowlist (
	pattern_id TEXT    PRIMARY KEY,
	pattern    TEXT    NOT NULL,
	scope      TEXT    NOT NULL,
	workdir    TEXT    NOT NULL DEFAULT '',
	session_id TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL
);
CREATE INDEX allowlist_by_created ON allowlist (created_at, pattern_id);

-- No foreign key: the audit log outlives the sessions it mentions.
CREATE TABLE approval_audit (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	request_id TEXT    NOT NULL,
	session_id TEXT    NOT NULL,
	tool       TEXT    NOT NULL,
	args       TEXT    NOT NULL,
	decision   TEXT    NOT NULL,
	scope      TEXT    NOT NULL,
	by_whom    TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	at         INTEGER NOT NULL
);
CREATE INDEX approval_audit_by_session ON approval_audit (session_id, id);

CREATE TABLE settings (
	namespace TEXT NOT NULL,
	key       TEXT NOT NULL,
	value     TEXT NOT NULL,
	PRIMARY KEY (namespace, key)
);
