-- The daemon registry and session leases. SQLite is single-node (one daemon
-- per file, enforced by the home directory's lock), so these only keep the
-- same semantics as on PostgreSQL: one owner, a rising epoch.

CREATE TABLE daemons (
	id           TEXT    PRIMARY KEY,
	grpc_addr    TEXT    NOT NULL,
	started_at   INTEGER NOT NULL,
	heartbeat_at INTEGER NOT NULL
);

CREATE TABLE session_leases (
	session_id TEXT    PRIMARY KEY,
	owner_id   TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE INDEX session_leases_by_owner ON session_leases (owner_id);
