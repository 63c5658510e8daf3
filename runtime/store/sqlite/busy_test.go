package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestBusyWaitIsBoundedInAll: while another process holds the database's
// write lock, each of several writes queued on the one write connection
// gives up within about one busy wait in all — its turn behind the others
// included — instead of waiting out one busy timeout per write ahead of
// it; each answers busy, and writes work again once the lock is gone.
func TestBusyWaitIsBoundedInAll(t *testing.T) {
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

	const writes = 4 // one after the other, they would take 4 busy waits
	took := make([]time.Duration, writes)
	errs := make([]error, writes)
	var wg sync.WaitGroup
	for i := range writes {
		wg.Go(func() {
			start := time.Now()
			errs[i] = st.PutSetting(ctx, "test", fmt.Sprint(i), []byte(`1`))
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range writes {
		if !busy(errs[i]) {
			t.Errorf("write %d under a held lock: %v, want busy", i, errs[i])
		}
		if took[i] > 3*wait {
			t.Errorf("write %d answered after %v: more than one busy wait (%v) in all", i, took[i], wait)
		}
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSetting(ctx, "test", "after", []byte(`1`)); err != nil {
		t.Fatalf("write after the lock is gone: %v", err)
	}
	// The write connection's busy timeout is back to the whole wait.
	var ms int
	if err := st.w.QueryRow("PRAGMA busy_timeout").Scan(&ms); err != nil || ms != int(wait.Milliseconds()) {
		t.Errorf("busy_timeout after the queue drained: %d (%v), want %d", ms, err, wait.Milliseconds())
	}
}

// busy reports whether err is SQLite's busy or store.ErrBusy.
func busy(err error) bool {
	return errors.Is(err, store.ErrBusy) || code(err)&0xff == 5 // SQLITE_BUSY
}
