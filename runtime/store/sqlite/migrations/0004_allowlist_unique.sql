-- One allowlist entry per (pattern, scope, workdir, session): two clients
-- adding the same pattern at once get one row (AddPattern inserts ON CONFLICT
-- DO NOTHING and answers the existing id). Duplicates left by earlier
-- versions are dropped first, keeping the oldest.
DELETE FROM allowlist WHERE EXISTS (
	SELECT 1 FROM allowlist b
	WHERE b.pattern = allowlist.pattern AND b.scope = allowlist.scope AND b.workdir = allowlist.workdir
	  AND b.session_id = allowlist.session_id
	  AND (b.created_at < allowlist.created_at OR (b.created_at = allowlist.created_at AND b.pattern_id < allowlist.pattern_id))
);
CREATE UNIQUE INDEX allowlist_entry ON allowlist (pattern, scope, workdir, session_id);
