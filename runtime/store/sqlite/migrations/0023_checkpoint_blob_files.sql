-- Checkpoint blobs larger than 64 KiB compressed are files beside the
-- database (<db>-blobs/<session>/<hash>), no longer rows of
-- checkpoint_chunks; the store moves such rows into files when it opens.
-- The tables do not change: this migration marks the schema, so that an
-- earlier build, which would read such a blob as empty, refuses to open
-- the store (docs/deploy.md, Upgrades) instead of failing every restore.
SELECT 1;
