-- Scale-out: the daemon registry and the session leases (docs/scale-out.md).
-- Expiry is judged by this server's clock (now()), never a daemon's.

CREATE TABLE daemons (
	id           text COLLATE "C" PRIMARY KEY,
	grpc_addr    text        NOT NULL,
	started_at   timestamptz NOT NULL DEFAULT now(),
	heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- One row per session ever owned; released and expired leases keep their
-- row so that epoch only ever rises (a write fenced with an old epoch is
-- refused forever).
CREATE TABLE session_leases (
	session_id text COLLATE "C" PRIMARY KEY,
	owner_id   text COLLATE "C" NOT NULL,
	epoch      bigint      NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX session_leases_by_owner ON session_leases (owner_id);
