-- Who added each allowlist entry (permission.allowlist.add, or an approval answer with a wider scope), its name then; '' = none recorded.
ALTER TABLE allowlist ADD COLUMN principal_id text NOT NULL DEFAULT '';
ALTER TABLE allowlist ADD COLUMN principal_name text NOT NULL DEFAULT '';
