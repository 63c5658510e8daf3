-- One allowlist entry per (pattern, scope, workdir, session): daemons adding
-- the same pattern at once get one row (AddPattern inserts ON CONFLICT DO
-- NOTHING and answers the existing id). Duplicates left by earlier versions
-- are dropped first, keeping the oldest.
DELETE FROM allowlist a USING allowlist b
WHERE a.pattern = b.pattern AND a.scope = b.scope AND a.workdir = b.workdir AND a.session_id = b.session_id
  AND (a.created_at, a.pattern_id) > (b.created_at, b.pattern_id);
CREATE UNIQUE INDEX allowlist_entry ON allowlist (pattern, scope, workdir, session_id);
