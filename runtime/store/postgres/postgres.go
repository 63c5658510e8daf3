package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is a store.Store kept in a PostgreSQL schema: the shared SQL layer
// (sqlstore) in PostgreSQL's flavor over the pool, and what PostgreSQL does
// its own way, natively on pgx.
type Store struct {
	*sqlstore.Store
	pool *pgxpool.Pool
	db   *sql.DB // the pool as database/sql sees it, for sqlstore
	// notify is the one connection LISTENing for every listener of the
	// store (ListenEvents, ListenApprovals, ListenProviderLimits).
	notify *notifier
}

var _ store.Store = (*Store)(nil)

// Timeouts are the PostgreSQL session settings every connection of the
// pool starts with, so that no statement of the daemon waits without end:
// a lock wait past Lock fails with 55P03 (store_busy), a statement past
// Statement with 57014, a transaction left idle past IdleInTransaction is
// ended by the server. A setting the DSN names itself wins; 0 leaves the
// server's default (no limit).
type Timeouts struct {
	Lock              time.Duration
	Statement         time.Duration
	IdleInTransaction time.Duration
}

// DefaultTimeouts are the settings Open uses unless WithTimeouts says
// otherwise (the daemon derives Lock from its lease, docs/scale-out.md).
var DefaultTimeouts = Timeouts{Lock: 5 * time.Second, Statement: time.Minute, IdleInTransaction: time.Minute}

// Option tunes Open.
type Option func(*options)

type options struct {
	timeouts Timeouts
	batch    bool
}

// WithTimeouts sets the pool's session timeouts (see Timeouts).
func WithTimeouts(t Timeouts) Option { return func(o *options) { o.timeouts = t } }

// WithBatchDurability makes every connection commit with
// synchronous_commit = off (unless the DSN sets it): a commit returns
// before the server's WAL reaches its disk, so a crash of the PostgreSQL
// server (not of a daemon) may lose the last commits, at most three times
// its wal_writer_delay (docs/operations.md, Durability).
func WithBatchDurability() Option { return func(o *options) { o.batch = true } }

// setTimeouts puts the timeouts into the pool's run-time parameters,
// leaving those the DSN sets.
func setTimeouts(cfg *pgxpool.Config, t Timeouts) {
	params := cfg.ConnConfig.RuntimeParams
	for name, d := range map[string]time.Duration{
		"lock_timeout": t.Lock, "statement_timeout": t.Statement, "idle_in_transaction_session_timeout": t.IdleInTransaction,
	} {
		if _, set := params[name]; !set && d > 0 {
			params[name] = strconv.FormatInt(max(d.Milliseconds(), 1), 10)
		}
	}
}

// unbounded lifts the lock and statement timeouts on conn for a wait that
// is meant to last (an advisory lock held while another daemon migrates);
// reset restores the connection's settings before it goes back to the pool.
func unbounded(ctx context.Context, conn *pgxpool.Conn) (reset func(), err error) {
	for _, q := range []string{`SET lock_timeout = 0`, `SET statement_timeout = 0`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	return func() {
		for _, q := range []string{`RESET lock_timeout`, `RESET statement_timeout`} {
			if _, err := conn.Exec(context.Background(), q); err != nil {
				conn.Conn().Close(context.Background()) // the pool drops it
				return
			}
		}
	}, nil
}

// Open connects to the database at dsn (a postgres:// URL or a key=value
// string, pool_* settings included), brings the schema named by its
// search_path up to date and returns the store. Its connections start with
// the Timeouts (DefaultTimeouts unless an option sets them).
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err) // pgconn redacts the password
	}
	o := options{timeouts: DefaultTimeouts}
	for _, opt := range opts {
		opt(&o)
	}
	setTimeouts(cfg, o.timeouts)
	if _, set := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; o.batch && !set {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	if err := check(ctx, pool, dsn); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	return &Store{
		Store: sqlstore.New(sqlstore.Config{Flavor: flavor, Read: db, Write: db, Memory: tsvector{pool}}),
		pool:  pool, db: db, notify: newNotifier(pool),
	}, nil
}

// Ping runs a query on a connection of the pool (a new one if none is
// idle), so that a server gone or unreachable makes it fail.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Close closes the connection pool.
func (s *Store) Close() error {
	err := s.db.Close()
	s.pool.Close()
	return err
}

// migration is one embedded schema change, numbered by its file name.
type migration struct {
	version int
	name    string
}

func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", base)
		}
		ms = append(ms, migration{v, base})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s have the same number: renumber the newer one", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// migrate applies, in order and each in its own transaction, every embedded
// migration the schema has not recorded. It holds a session-level advisory
// lock keyed on the schema throughout, so that daemons starting together
// neither race on CREATE TABLE nor apply a migration twice, while daemons on
// other schemas of the database do not wait.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	if schema == nil {
		return errors.New("no schema to create the tables in: the search_path names none that exists")
	}
	key := migrationLockKey(*schema)
	// Waiting for another daemon's migrations, and a migration itself, may
	// take longer than any statement of normal work.
	reset, err := unbounded(ctx, conn)
	if err != nil {
		return err
	}
	defer reset()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return fmt.Errorf("lock schema %s: %w", *schema, err)
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
			// Ending the session releases the lock; the pool drops a closed connection.
			conn.Conn().Close(context.Background())
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return err
	}
	done := make(map[int]bool, len(applied))
	for _, v := range applied {
		done[v] = true
	}
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		body, err := migrationFS.ReadFile("migrations/" + m.name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// No arguments: pgx sends it with the simple protocol, which
			// runs every statement of the file.
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

// migrationLockKey is the advisory lock guarding the migrations of schema.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("trellis/schema_migrations\x00" + schema))
	return int64(h.Sum64())
}

// flavor is PostgreSQL's spelling of the shared SQL: timestamptz, text[]
// lists, row locks, and SQLSTATE codes mapped to the store's sentinels.
var flavor = &sqlstore.Flavor{
	Name:           "postgres",
	ForUpdate:      " FOR UPDATE",
	ForNoKeyUpdate: " FOR NO KEY UPDATE",
	ForShare:       " FOR SHARE",
	Time:           func(t time.Time) any { return t },
	List:           func(list []string) any { return list },
	ScanList:       func(dst *[]string) any { return textArray{dst} },
	ListRows: func(param string) string {
		return `unnest(` + param + `::text[]) WITH ORDINALITY AS m (v, n)`
	},
	JSONCast:  "::json",
	JSONField: func(col, key string) string { return col + ` ->> '` + key + `'` },
	JSONInt:   func(col, key string) string { return `(` + col + ` ->> '` + key + `')::bigint` },
	JSONTrue:  func(col, key string) string { return col + ` ->> '` + key + `' = 'true'` },
	Day:       func(col string) string { return `to_char(` + col + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD')` },
	Bytewise:  ` COLLATE "C"`,
	Fault:     fault,
}

// textArray scans a text[] column, which pgx's database/sql driver hands
// over in PostgreSQL's text form.
type textArray struct{ dst *[]string }

var (
	typesMu sync.Mutex
	types   = pgtype.NewMap() // not safe for concurrent use
)

func (a textArray) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("a text[] of type %T", src)
	}
	typesMu.Lock()
	defer typesMu.Unlock()
	return types.Scan(pgtype.TextArrayOID, pgtype.TextFormatCode, []byte(s), a.dst)
}

// fault maps SQLSTATE codes to the shared layer's faults.
func fault(err error) sqlstore.Fault {
	var e *pgconn.PgError
	if !errors.As(err, &e) {
		return sqlstore.FaultOther
	}
	switch c := e.Code; {
	case c == "23505": // unique_violation
		return sqlstore.FaultUnique
	case c == "23503": // foreign_key_violation
		return sqlstore.FaultForeignKey
	case c == "53100" || c == "25006" || c == "53200":
		// disk_full, read_only_sql_transaction, out_of_memory
		return sqlstore.FaultCannotWrite
	case c == "55P03" || c == "57014":
		// lock_not_available (lock_timeout), query_canceled
		// (statement_timeout, or a context's deadline)
		return sqlstore.FaultTimeout
	case strings.HasPrefix(c, "22"):
		// data exception: a NUL byte, a bad encoding, out of range
		return sqlstore.FaultInvalid
	}
	return sqlstore.FaultOther
}

// Pool returns the store's connection pool, for components that keep their
// own tables in the same database (River's job queue).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// queryAll runs a query on the pool and collects its rows with scan
// (pgx.CollectRows: no rows give an empty slice).
func queryAll[T any](ctx context.Context, pool *pgxpool.Pool, scan func(pgx.Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
}
