-- Memory notes (memory.write / memory.search). Tags are a JSON array of
-- strings. memories_fts indexes store.IndexText of each note (its words,
-- already split and lower-cased in Go, so that the PostgreSQL backend
-- indexes the same words); its rowid is the note's seq.

CREATE TABLE memories (
	seq        INTEGER PRIMARY KEY,
	id         TEXT    NOT NULL UNIQUE,
	namespace  TEXT    NOT NULL,
	body       TEXT    NOT NULL,
	tags       TEXT    NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX memories_by_namespace ON memories (namespace, created_at DESC);

CREATE VIRTUAL TABLE memories_fts USING fts5 (
	words,
	tokenize = 'unicode61 remove_diacritics 0'
);
