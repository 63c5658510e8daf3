// Package postgres is the store.Store backend on PostgreSQL, for several daemons sharing state.
//
// It uses pgx (github.com/jackc/pgx/v5) through a pgxpool connection pool.
// The SQL both backends share is sqlstore's, run here in PostgreSQL's
// flavor (flavor: row locks, timestamptz, text[], SQLSTATE codes) over the
// same pool through pgx's database/sql driver (stdlib.OpenDBFromPool).
// This package keeps, natively on pgx, what PostgreSQL does its own way:
// the event log's append (one batch with its NOTIFY) and scan (the
// driver's buffers), LISTEN/NOTIFY, advisory locks, migrations, approvals,
// leases, receipts and provider limits on the server's clock, and the
// tsvector index of memory notes (the shared layer's MemoryIndex).
//
// Every table lives in the first schema of the connection's search_path, so
// one database can hold several independent stores (set search_path in the
// DSN, e.g. postgres://host/db?search_path=team_a). The schema is a list of
// numbered .sql files embedded in the binary and applied in order at Open,
// each in its own transaction, recorded in the schema_migrations table; a
// session-level advisory lock keyed on the schema makes daemons that start
// together apply each migration once. Multi-row writes run in one
// transaction at READ COMMITTED: a single query never sees half of one.
// Unique and foreign-key violations (SQLSTATE 23505, 23503) become
// store.ErrConflict and store.ErrNotFound; a value PostgreSQL cannot keep
// (SQLSTATE class 22, e.g. a NUL byte in a string) becomes store.ErrInvalid;
// a lock or statement timeout (55P03, 57014) becomes store.ErrTimeout.
// Memory notes are searched through a GIN-indexed tsvector ranked by
// ts_rank under the 'simple' configuration.
package postgres
