-- Principals and their API keys (docs/security.md). A key's secret is not
-- kept: key_hash is a hash of it, looked up on every authenticated call.
-- Deleting a principal deletes its keys.

CREATE TABLE principals (
	id         text COLLATE "C" PRIMARY KEY,
	name       text COLLATE "C" NOT NULL UNIQUE,
	kind       text        NOT NULL,
	role       text        NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE TABLE api_keys (
	id           text COLLATE "C" PRIMARY KEY,
	principal_id text COLLATE "C" NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
	name         text        NOT NULL,
	key_hash     bytea       NOT NULL UNIQUE,
	prefix       text        NOT NULL,
	created_at   timestamptz NOT NULL,
	expires_at   timestamptz,
	revoked_at   timestamptz
);
CREATE INDEX api_keys_by_principal ON api_keys (principal_id, created_at);
