// Package sqlstore is the SQL that the SQLite and PostgreSQL backends share, over database/sql.
//
// A Store runs one query text on both databases. The backends hand it
// their connection pools (PostgreSQL's pgxpool through pgx's stdlib
// driver, so both sides share one pool) and a Flavor, which holds what the
// dialects spell differently: row locks (FOR UPDATE, which SQLite's one
// writer makes needless), how a time or a list of strings is passed and
// read back (SQLite keeps microseconds and JSON text, PostgreSQL
// timestamptz and text[]), a list's rows in a FROM clause, JSON fields, a
// time's day, and how a driver error maps to the store's sentinels
// (ErrConflict, ErrNotFound, ErrInvalid, ErrCannotWrite, ErrTimeout).
// Placeholders are written $1, $2, … for both: PostgreSQL's own, and
// SQLite binds $N to the Nth argument.
//
// A write transaction is database/sql's Tx on PostgreSQL; on SQLite it
// runs on a connection of the write pool between BEGIN IMMEDIATE and
// COMMIT statements (RunTx, Flavor.Begin), since a Tx starts a goroutine
// for every transaction, and SQLite commits once per streamed chunk.
//
// It owns sessions, history with its journal (each write with the seq of
// the session's latest event, replayed by HistoryAt), the allowlist, the approval audit, settings,
// principals with their keys, grants and security events, the event log's
// append (PostgreSQL replaces it with its own) and its reads other than
// ScanEvents, memory notes (over a MemoryIndex, each dialect's full-text
// index: a tsvector column, an FTS5 table), usage sums, and the
// checkpoints of sessions' workdirs with their content blobs (a session's
// checkpoint writes take turns on its row; where the backend gives a
// Config.BlobDir, the large blobs are files there, blobFiles, and the rest
// rows of checkpoint_chunks), the import of a whole session
// in one transaction (ImportSession, for session.import); and the one
// check of a write's lease fences, CheckFences, which the backends' own
// writes call too.
//
// What a dialect does its own way stays in its package: the event log's
// scan (the driver's buffers on PostgreSQL, one text column through the
// driver on SQLite) and PostgreSQL's append (one pgx batch with its
// NOTIFY); leases, receipts and provider limits, decided on PostgreSQL's
// clock in single statements and on the daemon's under SQLite's write
// lock; LISTEN/NOTIFY, advisory locks, migrations and backups.
package sqlstore
