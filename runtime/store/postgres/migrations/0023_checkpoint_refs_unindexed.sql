-- checkpoint_refs loses its index by hash, as on SQLite (migration
-- 0022 there). A checkpoint names every file of its workdir, and these
-- hashes are random: each checkpoint wrote one entry into a different
-- page of that index per file, so recording one grew with the session's
-- history (docs/performance.md, checkpoint). Nothing needs it: the
-- collection of a deleted checkpoint's blobs reads the session's refs by
-- the primary key's first column, as the previous build's does.
DROP INDEX IF EXISTS checkpoint_refs_by_hash;
