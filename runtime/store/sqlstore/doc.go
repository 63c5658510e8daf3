// Package sqlstore is the SQL that the SQLite and PostgreSQL backends share, over database/sql.
//
// A Store runs one query text on both databases: the backends hand it their
// connection pools (PostgreSQL's pgxpool through pgx's stdlib driver, so
// both share one pool) and a Flavor, which holds what the dialects spell
// differently: row locks (FOR UPDATE, which SQLite's one writer makes
// needless), how a time or a list of strings is passed and read back
// (SQLite keeps microseconds and JSON text, PostgreSQL timestamptz and
// text[]), a list's rows in a FROM clause, and how a driver error maps to
// the store's sentinels (ErrConflict, ErrNotFound, ErrInvalid,
// ErrCannotWrite, ErrTimeout). Placeholders are written $1, $2, … for both:
// PostgreSQL's own, and SQLite binds $N to the Nth argument.
//
// It owns sessions, history, the allowlist, the approval audit, settings,
// principals with their keys, grants and security events, the event log's
// append (PostgreSQL replaces it with its own) and reads other than
// ScanEvents, the listing of memory notes, usage sums (JSON fields and days are flavor
// snippets too), and the one check of a write's lease fences
// (CheckFences), which the backends' own writes call too. What a dialect
// does its own way stays in its package: the event log's scan (driver
// buffers on PostgreSQL, one text column through the driver on SQLite) and
// PostgreSQL's append (one pgx batch with its NOTIFY), leases, receipts and provider limits (PostgreSQL's
// clock against the daemon's), memory notes' writes and search (tsvector against FTS5),
// LISTEN/NOTIFY, advisory locks, migrations, backups.
package sqlstore
