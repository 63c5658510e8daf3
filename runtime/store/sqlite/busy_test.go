package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestBusyWritesUnderHeldLock: while another process holds the database's
// write lock, several writes queued on the one write connection each answer
// busy, and writes work again once the lock is gone, with the connection's
// busy timeout back to the whole wait. (TestBusyWaitIsBoundedInAll checks
// how long they wait.)
func TestBusyWritesUnderHeldLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const wait = 500 * time.Millisecond
	st.busyWait = wait
	if _, err := st.w.Exec(fmt.Sprintf("PRAGMA busy_timeout = %d", wait.Milliseconds())); err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("sqlite", path+"?_busy_timeout=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	const writes = 4
	errs := make([]error, writes)
	var wg sync.WaitGroup
	for i := range writes {
		wg.Go(func() { errs[i] = st.PutSetting(ctx, store.Unfenced(), "test", fmt.Sprint(i), []byte(`1`)) })
	}
	wg.Wait()
	for i := range writes {
		if !busy(errs[i]) {
			t.Errorf("write %d under a held lock: %v, want busy", i, errs[i])
		}
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSetting(ctx, store.Unfenced(), "test", "after", []byte(`1`)); err != nil {
		t.Fatalf("write after the lock is gone: %v", err)
	}
	// The write connection's busy timeout is back to the whole wait.
	var ms int
	if err := st.w.QueryRow("PRAGMA busy_timeout").Scan(&ms); err != nil || ms != int(wait.Milliseconds()) {
		t.Errorf("busy_timeout after the queue drained: %d (%v), want %d", ms, err, wait.Milliseconds())
	}
}

// TestBusyWaitIsBoundedInAll: each of several writes queued on the one
// write connection while another process holds the lock gives up within
// one busy wait in all, its turn behind the others included, instead of
// waiting out one busy timeout per write ahead of it. It runs in a synctest
// bubble with the lock's wait played by lockedWrite on the bubble's clock
// (SQLite's own busy handler sleeps outside Go's clock), so the times are
// exact: each write waiting out a whole busy timeout once its turn came
// would take up to 1.75 waits.
func TestBusyWaitIsBoundedInAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := Open(filepath.Join(t.TempDir(), "t.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		wait := st.busyWait
		// lockedWrite is a write while another process holds the lock:
		// SQLite waits out the connection's busy timeout, then answers busy.
		lockedWrite := func() error {
			var ms int64
			if err := st.w.QueryRow("PRAGMA busy_timeout").Scan(&ms); err != nil {
				return err
			}
			time.Sleep(time.Duration(ms) * time.Millisecond)
			return fmt.Errorf("locked: %w", store.ErrBusy)
		}
		const writes = 4
		took := make([]time.Duration, writes)
		errs := make([]error, writes)
		var wg sync.WaitGroup
		for i := range writes {
			wg.Go(func() {
				// The writes come a quarter wait apart, so each but the
				// first gets its turn with part of its wait already spent.
				time.Sleep(time.Duration(i) * wait / writes)
				start := time.Now()
				errs[i] = st.writing(context.Background(), lockedWrite)
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		for i := range writes {
			if !errors.Is(errs[i], store.ErrBusy) {
				t.Errorf("write %d under a held lock: %v, want busy", i, errs[i])
			}
			// The busy timeout is at least 1 ms: a write whose turn came
			// with nothing of the wait left still tries once.
			if took[i] > wait+time.Millisecond {
				t.Errorf("write %d answered after %v: more than one busy wait (%v) in all", i, took[i], wait)
			}
		}
		var ms int
		if err := st.w.QueryRow("PRAGMA busy_timeout").Scan(&ms); err != nil || ms != int(wait.Milliseconds()) {
			t.Errorf("busy_timeout after the queue drained: %d (%v), want %d", ms, err, wait.Milliseconds())
		}
	})
}

// busy reports whether err is SQLite's busy or store.ErrBusy.
func busy(err error) bool {
	return errors.Is(err, store.ErrBusy) || code(err)&0xff == 5 // SQLITE_BUSY
}
