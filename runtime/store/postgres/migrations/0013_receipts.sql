-- Receipts of calls made with an operation id (docs/protocol.md,
-- "Operation ids"): written "started" before the call acts and "done" with
-- its outcome after; swept once expired.
CREATE TABLE operation_receipts (
	principal_id text COLLATE "C" NOT NULL,
	operation_id text COLLATE "C" NOT NULL,
	method       text        NOT NULL,
	params_hash  bytea       NOT NULL,
	session_id   text        NOT NULL,
	runner       text        NOT NULL,
	state        text        NOT NULL CHECK (state IN ('started', 'done')),
	error_code   text        NOT NULL,
	outcome      bytea,
	started_at   timestamptz NOT NULL,
	touched_at   timestamptz NOT NULL,
	expires_at   timestamptz NOT NULL,
	PRIMARY KEY (principal_id, operation_id)
);
CREATE INDEX operation_receipts_expiry ON operation_receipts (expires_at);
