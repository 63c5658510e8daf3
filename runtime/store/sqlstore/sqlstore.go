package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"strings"
	"sync"

	"github.com/trellis-run/trellis/runtime/store"
)

// Store is the shared part of a SQL backend's store.Store; a backend
// embeds it and adds what its dialect does its own way.
type Store struct {
	f      *Flavor
	r, w   *sql.DB
	turn   func(ctx context.Context, write func() error) error
	memory MemoryIndex
	files  *blobFiles // nil: blobs' chunks are rows of checkpoint_chunks

	stmtMu sync.Mutex
	stmts  map[stmtKey]*sql.Stmt // the hot statements, prepared once (prepared)
}

// Config is what New needs of a backend.
type Config struct {
	Flavor *Flavor
	// Read runs the reads; Write runs the writes (the same pool where the
	// database itself orders concurrent writers).
	Read, Write *sql.DB
	// Turn runs write, a use of Write, in the backend's order of writes
	// (SQLite's queue for its one writer); nil runs it at once.
	Turn func(ctx context.Context, write func() error) error
	// Memory is the full-text index of memory notes.
	Memory MemoryIndex
	// BlobDir, when set, is the directory that keeps the content of
	// checkpoint blobs as files, one per blob, instead of rows of
	// checkpoint_chunks (blobFiles); SyncBlobs syncs each before its row
	// commits.
	BlobDir   string
	SyncBlobs bool
}

// New returns the shared store over c's pools.
func New(c Config) *Store {
	turn := c.Turn
	if turn == nil {
		turn = func(_ context.Context, write func() error) error { return write() }
	}
	s := &Store{f: c.Flavor, r: c.Read, w: c.Write, turn: turn, memory: c.Memory}
	if c.BlobDir != "" {
		s.files = &blobFiles{dir: c.BlobDir, sync: c.SyncBlobs}
	}
	return s
}

// prepared returns query prepared on the pool db (s.r or s.w), preparing
// it the first time: a statement run on every commit or every page is
// parsed once per connection instead of once per use. On the write pool,
// a transaction binds it to its connection (Tx.Prepared).
func (s *Store) prepared(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	return prepareOnce(&s.stmts, stmtKey{db, query}, func() (*sql.Stmt, error) { return db.PrepareContext(ctx, query) })
}

// prepareOnce returns (*stmts)[key], made by prepare the first time.
func prepareOnce[K comparable](stmts *map[K]*sql.Stmt, key K, prepare func() (*sql.Stmt, error)) (*sql.Stmt, error) {
	if st := (*stmts)[key]; st != nil {
		return st, nil
	}
	st, err := prepare()
	if err != nil {
		return nil, err
	}
	if *stmts == nil {
		*stmts = map[K]*sql.Stmt{}
	}
	(*stmts)[key] = st
	return st, nil
}

type stmtKey struct {
	db    *sql.DB
	query string
}

// run is the context the flavor's statements run with: ctx, or ctx
// without its end where they run to completion (Flavor.Uninterrupted).
func (s *Store) run(ctx context.Context) context.Context {
	if s.f.Uninterrupted {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// Querier runs statements: a pool or a transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// write runs fn on the write pool in its turn, outside a transaction.
func (s *Store) write(ctx context.Context, fn func(q Querier) error) error {
	return s.turn(ctx, func() error { return fn(s.w) })
}

// Tx runs the statements of a write transaction.
type Tx interface {
	Querier
	// Prepared returns query prepared for this transaction's connection,
	// for the statements run once per row of a write.
	Prepared(ctx context.Context, query string) (*sql.Stmt, error)
}

// tx runs fn in a write transaction, in its turn, and commits it if fn
// succeeds and ctx has not ended meanwhile. fn runs its statements with
// the context it is given: ctx, or ctx without its end where the flavor's
// writes run to completion (Flavor.Uninterrupted). A flavor with a Begin
// statement runs it on one connection of the write pool (RunTx); the
// others in database/sql's Tx.
func (s *Store) tx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return s.turn(ctx, func() error {
		run := s.run(ctx)
		if s.f.Begin != "" {
			return RunTx(ctx, run, s.w, s.f.Begin, fn)
		}
		tx, err := s.w.BeginTx(run, nil)
		if err != nil {
			return err
		}
		if err := fn(run, sqlTx{tx, s}); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := ctx.Err(); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// sqlTx is database/sql's Tx as a Tx: its prepared statements are the
// write pool's (Store.prepared), bound to the transaction.
type sqlTx struct {
	*sql.Tx
	s *Store
}

func (t sqlTx) Prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	st, err := t.s.prepared(ctx, t.s.w, query)
	if err != nil {
		return nil, err
	}
	return t.StmtContext(ctx, st), nil
}

// RunTx runs fn in a transaction on one connection of db: begin (a BEGIN
// statement) starts it, COMMIT ends it when fn succeeds and ctx has not
// ended, ROLLBACK otherwise. The statements run with run (ctx, or ctx
// without its end). Unlike database/sql's Tx it starts no goroutine to
// watch the context, which at a model's pace, one commit per streamed
// chunk, was a sixth of the daemon's CPU (docs/performance.md). A
// connection that may still be inside the transaction afterwards is
// closed, not put back in the pool.
func RunTx(ctx, run context.Context, db *sql.DB, begin string, fn func(ctx context.Context, tx Tx) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(run, begin); err != nil {
		return err
	}
	tx := &connTx{Conn: conn}
	committed := false
	defer func() { // also when fn panics: the connection goes back to the pool
		tx.close()
		if !committed {
			rollback(conn)
		}
	}()
	if err := fn(run, tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tx.close() // a statement still open would keep the transaction's reads going
	if _, err := conn.ExecContext(run, "COMMIT"); err != nil {
		return err
	}
	committed = true
	return nil
}

// rollback ends the transaction on conn, if one is still open (a failed
// COMMIT may have ended it, or not); a connection that cannot say is
// closed instead of going back to the pool inside a transaction.
func rollback(conn *sql.Conn) {
	_, err := conn.ExecContext(context.Background(), "ROLLBACK")
	if err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// connTx is a transaction RunTx began on a connection: its prepared
// statements are prepared on that connection, once per transaction.
type connTx struct {
	*sql.Conn
	stmts map[string]*sql.Stmt
}

func (t *connTx) Prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	return prepareOnce(&t.stmts, query, func() (*sql.Stmt, error) { return t.PrepareContext(ctx, query) })
}

func (t *connTx) close() {
	for q, st := range t.stmts {
		st.Close()
		delete(t.stmts, q)
	}
}

// fenced runs fn on the write pool when w is Unfenced, else in a
// transaction that first checks w's fences on ids (fencedTx): a write of
// a daemon that lost the lease changes nothing.
func (s *Store) fenced(ctx context.Context, w store.Writer, ids []string, fn func(q Querier) error) error {
	if w.IsUnfenced() {
		return s.write(ctx, fn)
	}
	return s.fencedTx(ctx, w, ids, func(_ context.Context, tx Tx) error { return fn(tx) })
}

// fencedTx runs fn in a write transaction, in its turn, that first checks
// w's fences on the sessions ids (nil: every fence of w; CheckFences).
func (s *Store) fencedTx(ctx context.Context, w store.Writer, ids []string, fn func(ctx context.Context, tx Tx) error) error {
	fences, err := fencesOf(w, ids)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(ctx context.Context, tx Tx) error {
		if err := CheckFences(fences, s.f.leases(ctx, tx)); err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// affected runs a write statement and returns the rows it changed.
func affected(ctx context.Context, q Querier, query string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Scanner is a row to scan: *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// QueryAll runs a query on q and scans every row with scan, stopping at
// the first error. No rows give a nil slice.
func QueryAll[T any](ctx context.Context, q Querier, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// JSONText is the stored form of a JSON value: nil becomes "null".
func JSONText(v json.RawMessage) string {
	if v == nil {
		return "null"
	}
	return string(v)
}

// nullJSON is the stored form of an optional JSON column: nil becomes NULL.
func nullJSON(v json.RawMessage) any {
	if v == nil {
		return nil
	}
	return string(v)
}
