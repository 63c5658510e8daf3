package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// FileName is the database file's name inside the daemon's home directory.
const FileName = "trellis.db"

// readConns is the size of the read pool; WAL readers do not block each
// other nor the writer.
const readConns = 4

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is a store.Store kept in one SQLite file: the shared SQL layer
// (sqlstore) in SQLite's flavor, and what SQLite does its own way.
type Store struct {
	*sqlstore.Store
	w *sql.DB // exactly one connection: every write, in order
	r *sql.DB // query-only connections for reads
	// wslot is the turn on w: a write waits for it at most busyWait, and
	// then gets what is left of busyWait as its busy timeout.
	wslot    chan struct{}
	busyWait time.Duration // w's busy timeout (tests shorten it)

	// scans holds ScanEvents' statement prepared on each read connection
	// (the driver's connection → its driver.Stmt): the query is parsed
	// once per connection, not once per page.
	scans sync.Map

	wal *walCopier
}

// busyWait is how long a write waits in all for the database's write lock:
// its turn on the write connection (behind this daemon's other writes,
// which may themselves wait for another process's lock) included. It is
// the write connection's busy timeout.
const busyWait = 10 * time.Second

var _ store.Store = (*Store)(nil)

// Option tunes Open.
type Option func(*options)

type options struct {
	synchronous string // PRAGMA synchronous of the write connection
}

// WithBatchDurability commits with synchronous = NORMAL instead of FULL: in
// WAL mode a commit is not fsynced, the log is when walCopier copies it
// (at most walEvery after a write). A commit
// survives a crash of the daemon's process (the operating system has its
// writes); a power loss or an operating-system crash may roll back the last
// ones (docs/operations.md, Durability).
func WithBatchDurability() Option { return func(o *options) { o.synchronous = "NORMAL" } }

// syncData makes SQLite commit with fdatasync(2) instead of fsync(2), in
// the whole process (every database of the daemon), where the system has
// it: as SQLite's own builds do on Linux. The driver is transpiled without
// that choice and keeps fsync, whose extra work is the file's timestamps,
// which no read needs: the data and the size that reading it back needs
// are on disk either way, so a commit is as durable. Where fdatasync is
// missing (macOS) it changes nothing.
func syncData() { _, _ = sqlitedrv.Fdatasync(true) }

// Open opens (creating if needed, mode 0600) the database at path, brings
// its schema up to date and returns the store. The parent directory is
// created if missing. Every commit is fsynced unless an option says
// otherwise.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{synchronous: "FULL"}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("sqlite: unusable database path %q", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: create directory for %s: %w", path, err)
	}
	// Create the file ourselves so that it (and the -wal/-shm files SQLite
	// derives from it) is private: settings may hold provider credentials.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	f.Close()

	syncData()
	common := fmt.Sprintf("_busy_timeout=%d&_foreign_keys=1", busyWait.Milliseconds())
	// No commit copies the log into the database file: walCopier does,
	// beside the writes (wal_autocheckpoint(0)).
	w, err := sql.Open("sqlite", path+"?"+common+"&_journal_mode=WAL&_synchronous="+o.synchronous+"&_txlock=immediate&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := migrate(context.Background(), w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}

	r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	if err := r.Ping(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	slot := make(chan struct{}, 1)
	wal, err := newWALCopier(path, common+"&_synchronous="+o.synchronous, slot)
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{w: w, r: r, wslot: slot, busyWait: busyWait, wal: wal}
	s.Store = sqlstore.New(sqlstore.Config{Flavor: flavor, Read: r, Write: w, Turn: s.writing, Memory: fts5{s},
		BlobDir: BlobDir(path), SyncBlobs: o.synchronous == "FULL"})
	ctx := context.Background()
	if _, err := s.MoveChunksToFiles(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if _, err := s.SweepBlobFiles(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return s, nil
}

// BlobDir is the directory beside the database at path that keeps the
// content of checkpoint blobs, a file per blob: written once, whole, with
// one write and one sync, where a blob inside the database would go
// through its write-ahead log page by page, twice (docs/workspaces.md).
func BlobDir(path string) string { return path + "-blobs" }

// flavor is SQLite's spelling of the shared SQL: times are microseconds
// since the epoch, lists JSON text read back by json_each, and no row lock
// is needed, since every write holds the database's one write lock
// (BEGIN IMMEDIATE) from its start.
var flavor = &sqlstore.Flavor{
	Name:          "sqlite",
	Begin:         "BEGIN IMMEDIATE",
	Uninterrupted: true,
	Time:          func(t time.Time) any { return micros(t) },
	List: func(list []string) any {
		if list == nil {
			list = []string{} // json_each('null') is one NULL row, not none
		}
		b, _ := json.Marshal(list) // strings always marshal
		return string(b)
	},
	ScanList: func(dst *[]string) any { return jsonList{dst} },
	ListRows: func(param string) string {
		return `(SELECT key + 1 AS n, value AS v FROM json_each(` + param + `)) AS m`
	},
	JSONField: func(col, key string) string { return col + ` ->> '$.` + key + `'` },
	JSONInt:   func(col, key string) string { return col + ` ->> '$.` + key + `'` },
	JSONTrue:  func(col, key string) string { return col + ` ->> '$.` + key + `' IS 1` },
	Day:       func(col string) string { return `strftime('%Y-%m-%d', ` + col + ` / 1000000, 'unixepoch')` },
	Fault:     fault,
}

// jsonList scans a list stored as JSON text.
type jsonList struct{ dst *[]string }

func (l jsonList) Scan(src any) error {
	switch v := src.(type) {
	case string:
		return json.Unmarshal([]byte(v), l.dst)
	case []byte:
		return json.Unmarshal(v, l.dst)
	}
	return fmt.Errorf("a stored list of type %T", src)
}

// fault maps SQLite's result codes to the shared layer's faults.
func fault(err error) sqlstore.Fault {
	switch c := code(err); {
	case c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return sqlstore.FaultUnique
	case c == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.FaultForeignKey
	case c&0xff == sqliteReadOnly || c&0xff == sqliteFull || c&0xff == sqliteIOErr:
		return sqlstore.FaultCannotWrite
	}
	return sqlstore.FaultOther
}

// Ping runs a query on the read pool.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}

// Close stops copying the log and closes the connection pools; the last
// connection to close copies what is left of the log and removes it.
func (s *Store) Close() error {
	return errors.Join(s.wal.close(), s.r.Close(), s.w.Close())
}

// migrate applies, in order and each in its own transaction, every embedded
// migration newer than the database's version.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	type migration struct {
		version int
		name    string
	}
	var ms []migration
	for _, n := range names {
		base := filepath.Base(n)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", base)
		}
		ms = append(ms, migration{v, base})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for _, m := range ms {
		body, err := migrationFS.ReadFile("migrations/" + m.name)
		if err != nil {
			return err
		}
		err = writeTx(ctx, db, func(tx sqlstore.Tx) error {
			var n int
			// Checked inside the (immediate) transaction, so two daemons
			// starting at once do not both apply it.
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil || n > 0 {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, time.Now().UnixMicro())
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// writeTx runs fn in a write transaction (BEGIN IMMEDIATE, as every write
// of the store: flavor.Begin) and commits it if fn succeeds.
func writeTx(ctx context.Context, db *sql.DB, fn func(tx sqlstore.Tx) error) error {
	return cannotWrite(sqlstore.RunTx(ctx, context.WithoutCancel(ctx), db, flavor.Begin, func(_ context.Context, tx sqlstore.Tx) error { return fn(tx) }))
}

// SQLite's primary result codes for a write refused by the disk.
const (
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteFull     = 13
)

// cannotWrite marks the errors of a full or read-only database with
// store.ErrCannotWrite, so that callers can say so instead of "internal".
func cannotWrite(err error) error {
	switch code(err) & 0xff {
	case sqliteReadOnly, sqliteFull, sqliteIOErr:
		return fmt.Errorf("%w: %w", store.ErrCannotWrite, err)
	}
	return err
}

func (s *Store) writeTx(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
	return s.writing(ctx, func() error { return writeTx(ctx, s.w, fn) })
}

// writing runs fn, a write on s.w, in its turn. Without it a write queued
// behind another that waits out the busy timeout would wait that long for
// the connection and then as long again for the lock: store_busy after
// 20 s, or more further back in the queue. A write that had to wait for
// its turn runs with the rest of busyWait as its busy timeout.
func (s *Store) writing(ctx context.Context, fn func() error) error {
	start := time.Now()
	select {
	case s.wslot <- struct{}{}:
	default:
		t := time.NewTimer(s.busyWait)
		select {
		case s.wslot <- struct{}{}:
			t.Stop()
		case <-t.C:
			return fmt.Errorf("sqlite: %w: waited %s for its turn behind this daemon's other writes, which wait for another process's lock on the database", store.ErrBusy, s.busyWait)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	defer func() { <-s.wslot }()
	if waited := time.Since(start); waited > s.busyWait/100 {
		left := max(s.busyWait-waited, time.Millisecond)
		if _, err := s.w.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", left.Milliseconds())); err == nil {
			defer func() {
				_, _ = s.w.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", s.busyWait.Milliseconds()))
			}()
		}
	}
	err := fn()
	s.wal.wrote()
	return err
}

// code returns the SQLite extended result code carried by err, 0 if none.
func code(err error) int {
	var e *sqlitedrv.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// fromNullMicros reads an optional time: NULL is the zero time.
func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// execAffected runs a write statement and returns the rows it changed.
func execAffected(ctx context.Context, tx sqlstore.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// exec runs one write statement outside a transaction.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := s.writing(ctx, func() error {
		var err error
		res, err = s.w.ExecContext(ctx, query, args...)
		return err
	})
	return res, cannotWrite(err)
}
