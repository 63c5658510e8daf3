package eventlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestBlockedCommitFailsItsBatch (issue 38, on PostgreSQL): while a test
// transaction holds a session's lease row (SELECT … FOR UPDATE), that
// session's commit waits on its fence check; it fails within its deadline
// with store_busy (not recorded, seq reused), and another session's events
// commit meanwhile. Both ends are covered: the commit's own deadline, and
// the pool's lock_timeout when that comes first.
func TestBlockedCommitFailsItsBatch(t *testing.T) {
	server := pgtest.Server(t)
	for _, tc := range []struct {
		name     string
		timeouts postgres.Timeouts
		commit   time.Duration
	}{
		{"commit deadline", postgres.DefaultTimeouts, time.Second},
		{"lock_timeout", postgres.Timeouts{Lock: 500 * time.Millisecond, Statement: time.Minute, IdleInTransaction: time.Minute}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := postgres.Open(ctx, pgtest.FreshSchema(t, server), postgres.WithTimeouts(tc.timeouts))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			var lockTimeout string
			if err := st.Pool().QueryRow(ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil {
				t.Fatal(err)
			}
			if want := map[time.Duration]string{5 * time.Second: "5s", 500 * time.Millisecond: "500ms"}[tc.timeouts.Lock]; lockTimeout != want {
				t.Fatalf("the pool's lock_timeout is %q, want %q", lockTimeout, want)
			}
			fences := map[string]store.Fence{}
			for _, id := range []string{"blocked", "other"} {
				if err := st.CreateSession(ctx, store.Session{SessionID: id, Workdir: "/w", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
					t.Fatal(err)
				}
				l, err := st.AcquireLease(ctx, id, "d1", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				fences[id] = l.Fence()
			}
			log := newLog(t, st, eventlog.WithCommitTimeout(tc.commit), eventlog.WithFence(func(id string) (store.Fence, bool) {
				f, ok := fences[id]
				return f, ok
			}))
			for _, id := range []string{"blocked", "other"} {
				if _, err := log.Append(ctx, id, "note", map[string]int{"n": 1}); err != nil {
					t.Fatal(err)
				}
			}

			tx, err := st.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT 1 FROM session_leases WHERE session_id = 'blocked' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := log.Append(ctx, "blocked", "note", map[string]int{"n": 2})
				done <- err
			}()
			// A guard against a commit that never ends, not a measure.
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the blocked commit did not end while the lock was held")
			}
			if errs.CodeOf(err) != errcode.StoreBusy {
				t.Fatalf("the blocked commit: %v (code %s), want store_busy", err, errs.CodeOf(err))
			}
			// Another session appends while the lock is still held.
			ev, err := log.Append(ctx, "other", "note", map[string]int{"n": 2})
			if err != nil || ev.Seq != 2 {
				t.Fatalf("the other session's append while the lock is held: seq %d, %v; want seq 2", ev.Seq, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// Nothing of the failed batch was recorded: its seq is reused.
			if ev, err = log.Append(ctx, "blocked", "note", map[string]int{"n": 3}); err != nil || ev.Seq != 2 {
				t.Fatalf("the blocked session after the lock: seq %d, %v; want seq 2", ev.Seq, err)
			}
			for _, id := range []string{"blocked", "other"} {
				checkStored(t, st, id, 2)
			}
		})
	}
}
