package eventlog_test

import (
	"context"
	"errors"

	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
)

// cutEvents is memEvents that refuses writes as an unreachable store does
// while cut is set, and counts the writes it is asked for.
type cutEvents struct {
	*memEvents
	cut    atomic.Bool
	writes atomic.Int32
}

func (c *cutEvents) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	c.writes.Add(1)
	if c.cut.Load() {
		return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return c.memEvents.AppendEvents(ctx, w, evs)
}

// A daemon that lost a session's lease while its store was unreachable
// writes nothing more of it, not even a try, and its readers get the
// retraction notice under the seq after the last stored event they got,
// which voids the event they got from memory there; then they read the
// new owner's events under the same seqs, from the store.
func TestRetractAfterLeaseLost(t *testing.T) {
	st := &cutEvents{memEvents: newMemEvents("s")}
	var owned atomic.Bool
	owned.Store(true)
	log := eventlog.New(st, eventlog.WithFence(func(id string) (store.Fence, bool) {
		if !owned.Load() {
			return store.Fence{}, false
		}
		return store.Fence{Key: id, OwnerID: "d-a", Epoch: 1}, true
	}))
	defer log.Close()
	ctx := context.Background()
	ready := make(chan struct{}, 1)
	cur, err := log.Watch(ctx, "s", 0, func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	// The runtime's own consumers never see the notice.
	sub, err := log.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var pending []*store.Event
	next := func() store.Event {
		t.Helper()
		for len(pending) == 0 {
			evs, _, err := next(cur, ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if pending = evs; len(pending) == 0 {
				<-ready
			}
		}
		ev := pending[0]
		pending = pending[1:]
		return *ev
	}
	subNext := func() store.Event {
		t.Helper()
		for it := range sub.Items() {
			if it.CaughtUp {
				continue
			}
			return *it.Event
		}
		t.Fatalf("subscription ended: %v", sub.Err())
		return store.Event{}
	}
	for i := 1; i <= 2; i++ {
		if _, err := log.Append(ctx, "s", "tool.call", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 2; i++ {
		if ev := next(); ev.Seq != int64(i) || ev.Unstored || ev.Retracted {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	// The store becomes unreachable: seq 3 is held and sent from memory.
	st.cut.Store(true)
	if _, err := log.Append(ctx, "s", "tool.result", map[string]int{"n": 3}); errs.CodeOf(err) != errcode.StoreUnavailable {
		t.Fatalf("append while the store is cut: %v, want store_unavailable", err)
	}
	if ev := next(); ev.Seq != 3 || !ev.Unstored {
		t.Fatalf("held event: %+v, want seq 3 unstored", ev)
	}
	// The lease runs out: nothing more is tried, nothing is held.
	owned.Store(false)
	before := st.writes.Load()
	if _, err := log.Append(ctx, "s", "turn.done", map[string]int{"n": 4}); errs.CodeOf(err) != errcode.Overloaded {
		t.Fatalf("append without the lease: %v, want overloaded", err)
	}
	if err := log.Retract("s",
		eventlog.Notice{Kind: "error", Payload: map[string]string{"code": "lease_lost"}},
		eventlog.Notice{Kind: "turn.done", Payload: map[string]string{"reason": "error"}}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"error", "turn.done"} {
		if ev := next(); ev.Seq != 3 || !ev.Retracted || ev.Unstored || ev.Kind != kind {
			t.Fatalf("notice: %+v, want %s at seq 3, retracted", ev, kind)
		}
	}
	for log.Held("s") > 0 {
		time.Sleep(10 * time.Millisecond) // the writer drops what it can never store
	}
	if got := st.writes.Load(); got != before {
		t.Fatalf("%d store write(s) after the lease was lost", got-before)
	}
	// The new owner stores seqs 3 and 4; the reader gets them.
	st.cut.Store(false)
	if err := st.memEvents.AppendEvents(ctx, store.Unfenced(), []store.Event{
		{SessionID: "s", Seq: 3, Kind: "turn.done", Payload: []byte(`{"synthetic":true}`), TS: time.Now()},
		{SessionID: "s", Seq: 4, Kind: "turn.started", Payload: []byte(`{}`), TS: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	log.Wake("s", 4)
	for i, kind := range []string{"turn.done", "turn.started"} {
		ev := next()
		if ev.Seq != int64(3+i) || ev.Kind != kind || ev.Unstored || ev.Retracted {
			t.Fatalf("after the notice: %+v, want the stored %s at seq %d", ev, kind, 3+i)
		}
	}
	// The subscription gets 1, 2, maybe the held 3 (if it read it before
	// the notice), and never the notice: then the stored 3 and 4.
	var seqs []int64
	for {
		ev := subNext()
		if ev.Retracted {
			t.Fatalf("the subscription got the notice: %+v", ev)
		}
		seqs = append(seqs, ev.Seq)
		if ev.Seq == 3 && !ev.Unstored && ev.Kind != "turn.done" {
			t.Fatalf("subscription: stored seq 3 is %s, want the new owner's turn.done", ev.Kind)
		}
		if ev.Seq == 4 {
			break
		}
	}
	if n := len(seqs); n < 4 || seqs[0] != 1 || seqs[1] != 2 || seqs[n-2] != 3 {
		t.Fatalf("subscription seqs %v, want 1 2 [3 unstored] 3 4", seqs)
	}
}
