package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// Flavor is what one SQL dialect spells its own way.
type Flavor struct {
	// Name prefixes the errors the store wraps ("sqlite", "postgres").
	Name string
	// ForUpdate, ForNoKeyUpdate and ForShare end a SELECT that locks the
	// rows it reads until the transaction ends; "" where a write
	// transaction already excludes every other writer.
	ForUpdate, ForNoKeyUpdate, ForShare string
	// Time is a time as a query argument.
	Time func(time.Time) any
	// List is a list of strings as a query argument.
	List func([]string) any
	// ScanList is the Scan destination of a stored list of strings.
	ScanList func(*[]string) any
	// ListRows is a FROM item of the list argument param with columns n
	// (its position, from 1) and v (its text).
	ListRows func(param string) string
	// JSONCast ends a text expression to make it a JSON value
	// ("::json"; "" where JSON is text).
	JSONCast string
	// JSONField, JSONInt and JSONTrue read the field key of the JSON
	// column col: as text, as an integer (both NULL where the field is
	// missing), and as a test that it is JSON true.
	JSONField, JSONInt, JSONTrue func(col, key string) string
	// Day is the UTC day of the stored time col, "YYYY-MM-DD".
	Day func(col string) string
	// Bytewise ends a text expression to make it compare byte by byte.
	Bytewise string
	// Fault says what a driver error means for the store.
	Fault func(error) Fault
	// Begin, when set, is the statement that starts a write transaction
	// on a connection of the write pool, ended by COMMIT or ROLLBACK
	// statements (RunTx), instead of database/sql's Tx, which starts a
	// goroutine per transaction. SQLite's "BEGIN IMMEDIATE": its one
	// write connection makes a statement prepared per transaction cheap.
	// PostgreSQL keeps database/sql's Tx, whose prepared statements are
	// the pool's (preparing per transaction would be a round trip).
	Begin string
	// Uninterrupted runs the statements of a write transaction to their
	// end whatever its context (Store.tx checks the context before the
	// commit instead). SQLite's writes are short and local; its driver,
	// given a context that can end, starts a goroutine for every
	// statement to interrupt it. PostgreSQL's statements cross a network
	// and stay interruptible.
	Uninterrupted bool
}

// Fault is a driver error's meaning for the store.
type Fault int

// The faults a Flavor tells apart.
const (
	FaultOther       Fault = iota
	FaultUnique            // a unique key is taken: store.ErrConflict
	FaultForeignKey        // a referenced row is missing: store.ErrNotFound
	FaultInvalid           // the value cannot be kept: store.ErrInvalid
	FaultCannotWrite       // disk full, read-only: store.ErrCannotWrite
	FaultTimeout           // a lock or statement timeout: store.ErrTimeout
)

func (f *Flavor) isUnique(err error) bool     { return err != nil && f.Fault(err) == FaultUnique }
func (f *Flavor) isForeignKey(err error) bool { return err != nil && f.Fault(err) == FaultForeignKey }

// Fail wraps an unexpected error of op, marked with the sentinel its
// fault maps to (once: an error that carries it already is not marked
// again).
func (f *Flavor) Fail(op string, err error) error {
	var sentinel error
	switch f.Fault(err) {
	case FaultInvalid:
		sentinel = store.ErrInvalid
	case FaultCannotWrite:
		sentinel = store.ErrCannotWrite
	case FaultTimeout:
		sentinel = store.ErrTimeout
	}
	if sentinel == nil || errors.Is(err, sentinel) {
		return fmt.Errorf("%s: %s: %w", f.Name, op, err)
	}
	return fmt.Errorf("%s: %s: %w: %w", f.Name, op, sentinel, err)
}

// InsertErr maps an insert's error: a unique violation is a conflict on
// what (store.ErrConflict), any other failure is op's (see Fail).
func (f *Flavor) InsertErr(err error, what, op string) error {
	switch {
	case f.isUnique(err):
		return fmt.Errorf("%s: %w", what, store.ErrConflict)
	case err != nil:
		return f.Fail(op, err)
	}
	return nil
}

// RowErr maps the error of a read of one row: no row means what is not
// found (store.ErrNotFound), any other failure is op's.
func (f *Flavor) RowErr(err error, what, op string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return f.Fail(op, err)
}

// nullTime is an optional time as an argument: zero is NULL.
func (f *Flavor) nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return f.Time(t)
}

// scanTime is the Scan destination of a stored time: SQLite's
// microseconds or PostgreSQL's timestamptz, in UTC; NULL is the zero time.
func scanTime(t *time.Time) sql.Scanner { return timeDest{t} }

type timeDest struct{ t *time.Time }

func (d timeDest) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.t = time.Time{}
	case int64:
		*d.t = time.UnixMicro(v).UTC()
	case time.Time:
		*d.t = v.UTC()
	default:
		return fmt.Errorf("a stored time of type %T", src)
	}
	return nil
}
