-- Principals and their API keys (docs/security.md). A key's secret is not
-- kept: key_hash is a hash of it, looked up on every authenticated call.
-- Deleting a principal deletes its keys.

CREATE TABLE principals (
	id         TEXT    PRIMARY KEY,
	name       TEXT    NOT NULL UNIQUE,
	kind       TEXT    NOT NULL,
	role       TEXT    NOT NULL,
	created_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
	id           TEXT    PRIMARY KEY,
	principal_id TEXT    NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
	name         TEXT    NOT NULL,
	key_hash     BLOB    NOT NULL UNIQUE,
	prefix       TEXT    NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER,
	revoked_at   INTEGER
);
CREATE INDEX api_keys_by_principal ON api_keys (principal_id, created_at);
