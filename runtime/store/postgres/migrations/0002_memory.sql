-- Memory notes (memory.write / memory.search). words is the tsvector of
-- store.IndexText of each note (its words, already split and lower-cased
-- in Go, so that the SQLite backend indexes the same words), under the
-- 'simple' configuration: no stemming, no stop words.

CREATE TABLE memories (
	id         text COLLATE "C" PRIMARY KEY,
	namespace  text COLLATE "C" NOT NULL,
	body       text        NOT NULL,
	tags       text[]      NOT NULL,
	created_at timestamptz NOT NULL,
	words      tsvector    NOT NULL
);
CREATE INDEX memories_words ON memories USING GIN (words);
CREATE INDEX memories_by_namespace ON memories (namespace, created_at DESC);
