// Package sqlite is the embedded store.Store backend, one SQLite file in WAL mode.
//
// It uses modernc.org/sqlite (pure Go). Writes go through a single-connection
// pool with BEGIN IMMEDIATE, so they are serialised in the process and never
// fail on a lock upgrade; reads use a separate pool of query-only connections
// that WAL lets run while a write is in progress. Commits are synchronous=FULL
// (a write has reached the disk when its call returns) unless Open is given
// WithBatchDurability (synchronous=NORMAL: durable across a crash of the
// process, not of the machine). The schema is a list of
// numbered .sql files embedded in the binary and applied in order at Open,
// recorded in the schema_migrations table. Memory notes are searched with
// an FTS5 table ranked by bm25(). ScanEvents (the replay's read) takes each
// event row as one text column, "seq,ts,kind NUL payload", through the
// driver connection itself: the driver's cost is per column. Backup copies
// a live database (VACUUM INTO), Inspect checks a file without changing it
// (quick_check, schema version, gap-free event logs) and Restore makes a
// checked backup the store of a home (backup.go).
package sqlite
