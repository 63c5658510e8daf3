-- The security audit log (audit.list): every call of a method marked
-- (access).audit, allowed or refused. Append-only.
CREATE TABLE security_events (
	id             bigserial PRIMARY KEY,
	at             timestamptz NOT NULL,
	principal_id   text COLLATE "C" NOT NULL,
	principal_name text        NOT NULL,
	method         text COLLATE "C" NOT NULL,
	request        jsonb       NOT NULL,
	outcome        text        NOT NULL
);
CREATE INDEX security_events_by_principal ON security_events (principal_id, id);
CREATE INDEX security_events_by_method ON security_events (method, id);
