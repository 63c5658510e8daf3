// Package sqlite is the embedded store.Store backend, one SQLite file in WAL mode.
//
// It uses modernc.org/sqlite (pure Go) through database/sql. The SQL both
// backends share is sqlstore's, run here in SQLite's flavor (flavor:
// microsecond times, JSON lists, result codes mapped to the store's
// sentinels); this package keeps what SQLite does its own way: opening,
// the pragmas and the write queue, migrations, the event log's scan,
// leases, receipts and provider limits on the daemon's clock, the FTS5
// index of memory notes (fts5, the shared layer's MemoryIndex), backups.
//
// Writes go through a single-connection pool with BEGIN IMMEDIATE, so
// they are serialised in the process and never fail on a lock upgrade; a
// write transaction is that statement, the writes and COMMIT on the
// connection (sqlstore.RunTx), not database/sql's Tx, which starts a
// goroutine per transaction. Reads use a separate pool of query-only
// connections that WAL lets run while a write is in progress. Commits
// are synchronous=FULL (a write has reached the disk when its call
// returns; synced with fdatasync on Linux, as SQLite's own builds do:
// syncData) unless Open is given
// WithBatchDurability (synchronous=NORMAL: durable across a crash of the
// process, not of the machine). No commit copies the write-ahead log into
// the database file (a WAL checkpoint): walCopier does, on a connection of
// its own, at most every 200 ms after writes, finishing in the write
// queue's turn what commits added meanwhile (wal.go). The schema is a list of numbered .sql
// files embedded in the binary and applied in order at Open, recorded in
// the schema_migrations table. Memory notes are searched with an FTS5
// table ranked by bm25(). ScanEvents (the replay's read) takes each event
// row as one text column, "seq,ts,kind NUL payload", through the driver
// connection itself: the driver's cost is per column. Checkpoint blobs
// larger than sqlstore.InlineBlobMax are files beside the database
// (BlobDir, sqlstore's blobFiles), synced when commits are; Open moves
// such blobs found in checkpoint_chunks (an earlier Trellis's, a
// backup's) into files and removes files no row names. Backup copies a
// live database (VACUUM INTO) and the blob files into the copy's
// checkpoint_chunks, Inspect checks a file without changing it
// (quick_check, schema version, gap-free event logs) and Restore makes a
// checked backup the store of a home (backup.go).
package sqlite
