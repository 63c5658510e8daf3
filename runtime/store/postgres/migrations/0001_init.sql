-- Initial schema, the same tables as the SQLite backend's.
--
-- Times are timestamptz (microsecond precision). JSON is the json type, not
-- jsonb: json keeps the text as written and accepts the \u0000 escape, which
-- tool output can carry and jsonb rejects. Ids and keys use the "C"
-- collation so that ordering is bytewise, as in SQLite, whatever the
-- database's locale. "" means none for optional strings.

CREATE TABLE sessions (
	session_id        text COLLATE "C" PRIMARY KEY,
	workdir           text        NOT NULL,
	mode              text        NOT NULL,
	provider          text        NOT NULL DEFAULT '',
	model             text        NOT NULL DEFAULT '',
	agent             text        NOT NULL DEFAULT '',
	kind              text        NOT NULL,
	parent_session_id text        NOT NULL DEFAULT '',
	job_id            text        NOT NULL DEFAULT '',
	title             text        NOT NULL DEFAULT '',
	last_prompt       text        NOT NULL DEFAULT '',
	created_at        timestamptz NOT NULL,
	last_activity_at  timestamptz,          -- NULL = no activity yet
	closed            boolean     NOT NULL DEFAULT false,
	backend           json                  -- NULL = none
);
CREATE INDEX sessions_by_created ON sessions (created_at DESC, session_id DESC);
CREATE INDEX sessions_by_workdir ON sessions (workdir, created_at DESC);

CREATE TABLE events (
	session_id text COLLATE "C" NOT NULL REFERENCES sessions (session_id),
	seq        bigint      NOT NULL,
	kind       text        NOT NULL,
	payload    json        NOT NULL,
	ts         timestamptz NOT NULL,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE history (
	session_id text COLLATE "C" NOT NULL REFERENCES sessions (session_id),
	idx        bigint NOT NULL,
	message    json   NOT NULL,
	PRIMARY KEY (session_id, idx)
);

CREATE TABLE allowlist (
	pattern_id text COLLATE "C" PRIMARY KEY,
	pattern    text        NOT NULL,
	scope      text        NOT NULL,
	workdir    text        NOT NULL DEFAULT '',
	session_id text        NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL
);
CREATE INDEX allowlist_by_created ON allowlist (created_at, pattern_id);

-- No foreign key: the audit log outlives the sessions it mentions.
CREATE TABLE approval_audit (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	request_id text        NOT NULL,
	session_id text        NOT NULL,
	tool       text        NOT NULL,
	args       json        NOT NULL,
	decision   text        NOT NULL,
	scope      text        NOT NULL,
	by_whom    text        NOT NULL,
	reason     text        NOT NULL,
	at         timestamptz NOT NULL
);
CREATE INDEX approval_audit_by_session ON approval_audit (session_id, id);

CREATE TABLE settings (
	namespace text COLLATE "C" NOT NULL,
	key       text COLLATE "C" NOT NULL,
	value     json NOT NULL,
	PRIMARY KEY (namespace, key)
);
