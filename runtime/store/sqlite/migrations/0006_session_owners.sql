-- Who may see a session (docs/security.md): its owner (the principal that
-- created it; '' = the daemon token or the daemon itself) and the
-- principals it was shared with. Grants go with their session and with
-- their principal.
ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_by_owner ON sessions (owner, created_at DESC);

CREATE TABLE session_grants (
	session_id   TEXT    NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	principal_id TEXT    NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
	role         TEXT    NOT NULL,
	granted_at   INTEGER NOT NULL,
	PRIMARY KEY (session_id, principal_id)
);
CREATE INDEX session_grants_by_principal ON session_grants (principal_id);
