-- The journal of each session's history writes (docs/workspaces.md,
-- session.fork and session.rewind), as on SQLite (migration 0020 there):
-- every append and replace, in order (n), with the seq of the session's
-- latest stored event when it was written. Replaying the rows of seq at
-- most S gives the model history the session had at event S. A base row
-- holds the history a session had when its journal began.
CREATE TABLE history_journal (
	session_id text COLLATE "C" NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
	n          bigint NOT NULL,
	seq        bigint NOT NULL,
	op         text   NOT NULL,
	messages   text   NOT NULL,
	PRIMARY KEY (session_id, n)
);
