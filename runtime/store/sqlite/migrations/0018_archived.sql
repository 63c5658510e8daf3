-- An archived session is read-only and listed apart (docs/export.md).
ALTER TABLE sessions ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
