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

// TestCommitStartsNoGoroutine: a commit of a batch of events, under a
// deadline as the event log commits, starts no goroutine: not one per
// statement (the driver's, to interrupt a statement whose context ends),
// nor one per transaction (database/sql's Tx has one watch its context:
// sqlstore.RunTx runs BEGIN and COMMIT itself). At a model's pace, one
// commit per chunk, those hand-offs were much of a commit's cost
// (docs/performance.md, issue 34).
func TestCommitStartsNoGoroutine(t *testing.T) {
	s := withSession(t)
	ctx := context.Background()
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
	commit() // the pools open their connections on the first commit
	before := goroutinesCreated()
	for range commits {
		commit()
	}
	created := goroutinesCreated() - before
	if created >= commits/5 {
		t.Errorf("%d commits of %d events started %d goroutines, want none per commit", commits, perCommit, created)
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
	s := withSession(t)
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err := s.AppendEvents(ended, store.Unfenced(), []store.Event{{SessionID: "s-1", Seq: 1, Kind: "turn.started", Payload: json.RawMessage(`{}`), TS: time.Now()}})
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

// TestReadsStartNoGoroutine: reading a session page by page (ScanEvents
// and LastSeq, as a resume does for each answer) under a context that can
// end starts no goroutine.
func TestReadsStartNoGoroutine(t *testing.T) {
	s := withEvents(t, 600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := func() {
		for after := int64(0); after < 600; after += 100 {
			n := 0
			if err := s.ScanEvents(ctx, "s-1", after, 100, func(*store.EventRow) error { n++; return nil }); err != nil || n != 100 {
				t.Fatalf("ScanEvents after %d: %d rows, %v", after, n, err)
			}
			if last, err := s.LastSeq(ctx, "s-1"); err != nil || last != 600 {
				t.Fatalf("LastSeq = %d, %v", last, err)
			}
		}
	}
	read() // the statements are prepared on the first reads
	before := goroutinesCreated()
	read()
	if created := goroutinesCreated() - before; created > 0 {
		t.Errorf("six pages read started %d goroutines, want none", created)
	}
}

// TestScanStopsWhenContextEnds: a scan whose context ends stops within a
// few hundred rows with the context's error.
func TestScanStopsWhenContextEnds(t *testing.T) {
	s := withEvents(t, 2000)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := s.ScanEvents(ctx, "s-1", 0, 0, func(*store.EventRow) error {
		n++
		if n == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n > 256 {
		t.Fatalf("ScanEvents = %v after %d rows, want context.Canceled within 256", err, n)
	}
}

// withSession is a fresh store holding an empty session s-1.
func withSession(tb testing.TB, opts ...Option) *Store {
	tb.Helper()
	return withSessionAt(tb, filepath.Join(tb.TempDir(), FileName), opts...)
}

// withSessionAt is withSession with the database at path.
func withSessionAt(tb testing.TB, path string, opts ...Option) *Store {
	tb.Helper()
	s, err := Open(path, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.CreateSession(context.Background(), store.Session{SessionID: "s-1", Workdir: "/w", Mode: "default", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
		tb.Fatal(err)
	}
	return s
}

// withEvents is a fresh store whose session s-1 holds n events.
func withEvents(tb testing.TB, n int) *Store {
	tb.Helper()
	s := withSession(tb)
	evs := make([]store.Event, n)
	for i := range evs {
		evs[i] = store.Event{SessionID: "s-1", Seq: int64(i + 1), Kind: "message.delta", Payload: json.RawMessage(`{"text":"d "}`), TS: time.Now()}
	}
	if err := s.AppendEvents(context.Background(), store.Unfenced(), evs); err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkCommit: one commit of eight events under a deadline, as the
// event log commits a paced batch (batch durability: the CPU, not the
// disk's sync).
func BenchmarkCommit(b *testing.B) {
	s := withSession(b, WithBatchDurability())
	ctx := context.Background()
	seq := int64(0)
	evs := make([]store.Event, 8)
	for b.Loop() {
		for i := range evs {
			seq++
			evs[i] = store.Event{SessionID: "s-1", Seq: seq, Kind: "message.delta", Payload: json.RawMessage(`{"text":"d "}`), TS: time.Now()}
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := s.AppendEvents(cctx, store.Unfenced(), evs); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// BenchmarkResumePage: one page of 100 events and the session's last seq,
// what a resume reads for each answer, under a context that can end.
func BenchmarkResumePage(b *testing.B) {
	s := withEvents(b, 10_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := int64(0)
	for b.Loop() {
		if _, err := s.LastSeq(ctx, "s-1"); err != nil {
			b.Fatal(err)
		}
		if err := s.ScanEvents(ctx, "s-1", after, 100, func(*store.EventRow) error { return nil }); err != nil {
			b.Fatal(err)
		}
		after = (after + 100) % 9_900
	}
}
