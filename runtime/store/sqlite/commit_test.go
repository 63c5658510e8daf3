package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestCommitStartsNoGoroutinePerStatement: a commit of a batch of events,
// under a deadline as the event log commits, starts at most one goroutine
// (database/sql's, for the transaction), not one per statement (the
// driver's, to interrupt a statement whose context ends). At a model's
// pace that hand-off was most of a commit's cost (docs/performance.md,
// "stream", issue 34).
func TestCommitStartsNoGoroutinePerStatement(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.CreateSession(ctx, store.Session{SessionID: "s-1", Workdir: "/w", Mode: "default", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	const commits, perCommit = 50, 8
	seq := int64(0)
	commit := func() {
		evs := make([]store.Event, perCommit)
		for i := range evs {
			seq++
			evs[i] = store.Event{SessionID: "s-1", Seq: seq, Kind: "message.delta", Payload: json.RawMessage(`{"text":"d "}`), TS: time.Now()}
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := s.AppendEvents(cctx, store.Unfenced(), evs); err != nil {
			t.Fatal(err)
		}
	}
	commit() // the insert is prepared once, on the first commit
	before := goroutinesCreated()
	for range commits {
		commit()
	}
	created := goroutinesCreated() - before
	if created > commits {
		t.Errorf("%d commits of %d events started %d goroutines, want at most one a commit", commits, perCommit, created)
	}
	n := 0
	if err := s.ScanEvents(ctx, "s-1", 0, 0, func(*store.EventRow) error { n++; return nil }); err != nil || n != int(seq) {
		t.Fatalf("stored %d events (%v), want %d", n, err, seq)
	}
}

// TestEndedContextCommitsNothing: SQLite's write statements run to their
// end whatever their context, so a write transaction whose context has
// ended is rolled back before its commit: it stores nothing.
func TestEndedContextCommitsNothing(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.CreateSession(ctx, store.Session{SessionID: "s-1", Workdir: "/w", Mode: "default", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err = s.AppendEvents(ended, store.Unfenced(), []store.Event{{SessionID: "s-1", Seq: 1, Kind: "turn.started", Payload: json.RawMessage(`{}`), TS: time.Now()}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AppendEvents = %v, want context.Canceled", err)
	}
	if last, err := s.LastSeq(ctx, "s-1"); err != nil || last != 0 {
		t.Fatalf("LastSeq = %d, %v; want 0: nothing committed", last, err)
	}
}

func goroutinesCreated() uint64 {
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}
