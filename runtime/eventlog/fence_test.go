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

// TestFencedAppend: a daemon whose lease was taken over cannot add to the
// session's log; once it holds the lease again it continues after the
// events the other daemon wrote.
func TestFencedAppend(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.CreateSession(ctx, store.Session{SessionID: "s", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
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
