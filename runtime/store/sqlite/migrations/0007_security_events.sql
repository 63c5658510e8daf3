-- The security audit log (audit.list): every call of a method marked
-- (access).audit, allowed or refused. Append-only.
CREATE TABLE security_events (
	id             INTEGER PRIMARY KEY AUTOINCREMENT,
	at             INTEGER NOT NULL,
	principal_id   TEXT    NOT NULL,
	principal_name TEXT    NOT NULL,
	method         TEXT    NOT NULL,
	request        TEXT    NOT NULL,
	outcome        TEXT    NOT NULL
);
CREATE INDEX security_events_by_principal ON security_events (principal_id, id);
CREATE INDEX security_events_by_method ON security_events (method, id);
