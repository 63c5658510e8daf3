-- Receipts of calls made with an operation id (docs/protocol.md,
-- "Operation ids"): written "started" before the call acts and "done" with
-- its outcome after; swept once expired.
CREATE TABLE operation_receipts (
	principal_id TEXT    NOT NULL,
	operation_id TEXT    NOT NULL,
	method       TEXT    NOT NULL,
	params_hash  BLOB    NOT NULL,
	session_id   TEXT    NOT NULL,
	runner       TEXT    NOT NULL,
	state        TEXT    NOT NULL CHECK (state IN ('started', 'done')),
	error_code   TEXT    NOT NULL,
	outcome      BLOB,
	started_at   INTEGER NOT NULL,
	touched_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	PRIMARY KEY (principal_id, operation_id)
);
CREATE INDEX operation_receipts_expiry ON operation_receipts (expires_at);
