package eventlog_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// sessionStore opens a SQLite store holding one session, "s" (closed
// when the test ends).
func sessionStore(t *testing.T) (*sqlite.Store, context.Context) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	if err := st.CreateSession(ctx, store.Session{SessionID: "s", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return st, ctx
}

// takeOver gives lease a of session "s" back, takes the session as
// another daemon (d-b) and writes its seq 3 there, returning d-b's lease.
func takeOver(t *testing.T, st *sqlite.Store, a store.Lease) store.Lease {
	t.Helper()
	ctx := context.Background()
	if err := st.ReleaseLease(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := st.AcquireLease(ctx, "s", "d-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AppendEvents(ctx, store.Under(b.Fence()), []store.Event{{SessionID: "s", Seq: 3, Kind: "k", Payload: []byte(`{}`), TS: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFencedAppend: a daemon whose lease was taken over cannot add to the
// session's log; once it holds the lease again it continues after the
// events the other daemon wrote.
func TestFencedAppend(t *testing.T) {
	st, ctx := sessionStore(t)
	var mu sync.Mutex
	var fence *store.Fence
	setFence := func(f *store.Fence) { mu.Lock(); fence = f; mu.Unlock() }
	log := eventlog.New(st, eventlog.WithFence(func(string) (store.Fence, bool) {
		mu.Lock()
		defer mu.Unlock()
		if fence == nil {
			return store.Fence{}, false
		}
		return *fence, true
	}))
	defer log.Close()

	if _, err := log.Append(ctx, "s", "k", nil); err == nil {
		t.Fatal("an append without a lease was stored")
	}
	a, err := st.AcquireLease(ctx, "s", "d-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := a.Fence()
	setFence(&f)
	for i := 1; i <= 2; i++ {
		ev, err := log.Append(ctx, "s", "k", nil)
		if err != nil || ev.Seq != int64(i) {
			t.Fatalf("append %d under the lease: seq %d, %v", i, ev.Seq, err)
		}
	}
	// Another daemon takes over and writes seq 3.
	b := takeOver(t, st, a)
	_, err = log.Append(ctx, "s", "k", nil)
	if errs.CodeOf(err) != errcode.Overloaded {
		t.Fatalf("append after a takeover: %v, want overloaded (the lease was lost)", err)
	}
	// Back to this daemon: it continues at 4.
	if err := st.ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	a2, err := st.AcquireLease(ctx, "s", "d-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	log.Reload("s")
	f = a2.Fence()
	setFence(&f)
	ev, err := log.Append(ctx, "s", "k", nil)
	if err != nil || ev.Seq != 4 {
		t.Fatalf("append after re-acquiring: seq %d, %v; want 4", ev.Seq, err)
	}
	if w := log.Watched(); len(w) != 0 {
		t.Fatalf("watched %v with no subscription", w)
	}
	sub, err := log.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if w := log.Watched(); len(w) != 1 || w[0] != "s" {
		t.Fatalf("watched %v, want [s]", w)
	}
}

// ownedLog opens a SQLite store holding session "s", takes its lease as
// daemon d-a and appends seqs 1 and 2 through a log fenced by that lease.
// lose makes the log judge the lease lost from then on.
func ownedLog(t *testing.T) (st *sqlite.Store, log *eventlog.Log, a store.Lease, lose func()) {
	t.Helper()
	st, ctx := sessionStore(t)
	a, err := st.AcquireLease(ctx, "s", "d-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	held := true
	log = eventlog.New(st, eventlog.WithFence(func(string) (store.Fence, bool) {
		mu.Lock()
		defer mu.Unlock()
		return a.Fence(), held
	}))
	t.Cleanup(func() { log.Close() })
	for range 2 {
		if _, err := log.Append(ctx, "s", "k", nil); err != nil {
			t.Fatal(err)
		}
	}
	return st, log, a, func() { mu.Lock(); held = false; mu.Unlock() }
}

// TestLastSeqAfterTakeover: a daemon that wrote a session and then lost
// its lease reads the session's last seq from the store, where the new
// owner appended: its own count is stale. LastSeq says so, and a cursor
// opened then replays the new owner's events too.
func TestLastSeqAfterTakeover(t *testing.T) {
	st, log, a, lose := ownedLog(t)
	ctx := context.Background()
	if last, err := log.LastSeq(ctx, "s"); err != nil || last != 2 {
		t.Fatalf("LastSeq under the lease: %d, %v; want 2", last, err)
	}
	// This daemon's lease lapses; another takes the session and writes 3.
	lose()
	takeOver(t, st, a)
	if last, err := log.LastSeq(ctx, "s"); err != nil || last != 3 {
		t.Fatalf("LastSeq after the takeover: %d, %v; want 3 (the store's)", last, err)
	}
	cur, err := log.Watch(ctx, "s", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	var seqs []int64
	if _, _, err := cur.Visit(ctx, 0, 0, func(ev *store.Event) error { seqs = append(seqs, ev.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || seqs[2] != 3 || cur.Behind() {
		t.Fatalf("a cursor after the takeover read %v (behind %v), want 1, 2, 3", seqs, cur.Behind())
	}
}

// TestWakeOfOwnCommits: the store's notice of a commit can reach the log
// before its writer has counted and published that commit. For a session
// the log writes, that Wake is its own commit's echo: no cursor reads the
// event before the log counts it (a resume's target, LastSeq), so nothing
// a client receives is missing from a resume made after it. For a session
// another daemon writes, Wake reads the store.
func TestWakeOfOwnCommits(t *testing.T) {
	tests := []struct {
		name  string
		held  bool
		reads bool // the cursor reads seq 3 on the Wake
	}{
		{"held: the echo of its own commit", true, false},
		{"lost: another daemon's commit", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, log, a, lose := ownedLog(t)
			ctx := context.Background()
			cur, err := log.Watch(ctx, "s", 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cur.Close()
			var seqs []int64
			visit := func(ev *store.Event) error { seqs = append(seqs, ev.Seq); return nil }
			if _, _, err := cur.Visit(ctx, 0, 0, visit); err != nil || len(seqs) != 2 {
				t.Fatalf("replay: %v, %v; want seqs 1 and 2", seqs, err)
			}
			// Seq 3 is in the store, and the log has not counted it: its
			// writer is about to publish it, or another daemon wrote it.
			if err := st.AppendEvents(ctx, store.Under(a.Fence()), []store.Event{{SessionID: "s", Seq: 3, Kind: "k", Payload: []byte(`{}`), TS: time.Now()}}); err != nil {
				t.Fatal(err)
			}
			if !tc.held {
				lose()
			}
			log.Wake("s", 3)
			seqs = nil
			if _, _, err := cur.Visit(ctx, 0, 0, visit); err != nil {
				t.Fatal(err)
			}
			if got := len(seqs) == 1 && seqs[0] == 3; got != tc.reads {
				t.Errorf("after Wake(3) the cursor read %v; want seq 3 read: %v", seqs, tc.reads)
			}
			last, err := log.LastSeq(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int64{true: 2, false: 3}[tc.held]; last != want {
				t.Errorf("LastSeq %d, want %d", last, want)
			}
		})
	}
}
