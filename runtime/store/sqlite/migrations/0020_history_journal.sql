-- The journal of each session's history writes (docs/workspaces.md,
-- session.fork and session.rewind), as on PostgreSQL (migration 0021
-- there): every append and replace, in order (n), with the seq of the
-- session's latest stored event when it was written. Replaying the rows of
-- seq at most S gives the model history the session had at event S. A
-- base row holds the history a session had when its journal began.
CREATE TABLE history_journal (
	session_id TEXT    NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	n          INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	op         TEXT    NOT NULL,
	messages   TEXT    NOT NULL,
	PRIMARY KEY (session_id, n)
);
