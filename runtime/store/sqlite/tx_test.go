package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// TestWriteTransactionEnds: a write transaction (sqlstore.RunTx, BEGIN
// IMMEDIATE … COMMIT on the one write connection) whose work fails,
// panics or outlives its context is rolled back: it stores nothing, and
// the connection goes back to the pool outside any transaction, so the
// next write commits.
func TestWriteTransactionEnds(t *testing.T) {
	insert := func(ctx context.Context, tx sqlstore.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO events (session_id, seq, kind, payload, ts) VALUES ('s-1', 1, 'turn.started', '{}', 0)`)
		return err
	}
	failed := errors.New("the work failed")
	var endContext context.CancelFunc // the running case's
	tests := []struct {
		name   string
		work   func(ctx context.Context, tx sqlstore.Tx) error
		panics bool
		want   error
	}{
		{name: "work fails", work: func(ctx context.Context, tx sqlstore.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			return failed
		}, want: failed},
		{name: "work panics", work: func(ctx context.Context, tx sqlstore.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			panic(failed)
		}, panics: true},
		{name: "context ends before the commit", work: func(ctx context.Context, tx sqlstore.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			endContext()
			return nil
		}, want: context.Canceled},
		{name: "statement fails", work: func(ctx context.Context, tx sqlstore.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			return insert(ctx, tx) // the same primary key again
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := withSession(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			endContext = cancel
			var err error
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				err = s.writeTx(ctx, func(tx sqlstore.Tx) error { return tc.work(context.WithoutCancel(ctx), tx) })
				return false
			}()
			if panicked != tc.panics {
				t.Fatalf("panicked %v, want %v", panicked, tc.panics)
			}
			switch {
			case tc.panics:
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("err = %v, want %v", err, tc.want)
			case err == nil:
				t.Fatal("err = nil, want the transaction to fail")
			}
			bg := context.Background()
			if last, err := s.LastSeq(bg, "s-1"); err != nil || last != 0 {
				t.Fatalf("LastSeq = %d, %v; want 0: the transaction stored nothing", last, err)
			}
			ev := store.Event{SessionID: "s-1", Seq: 1, Kind: "turn.started", Payload: json.RawMessage(`{}`), TS: time.Now()}
			if err := s.AppendEvents(bg, store.Unfenced(), []store.Event{ev}); err != nil {
				t.Fatalf("the next write: %v", err)
			}
			if last, err := s.LastSeq(bg, "s-1"); err != nil || last != 1 {
				t.Fatalf("LastSeq after the next write = %d, %v; want 1", last, err)
			}
		})
	}
}
