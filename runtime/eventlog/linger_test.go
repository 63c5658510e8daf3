package eventlog_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
)

// countingEvents counts the transactions of an event store.
type countingEvents struct {
	*memEvents
	commits atomic.Int64
}

func (c *countingEvents) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	c.commits.Add(1)
	return c.memEvents.AppendEvents(ctx, w, evs)
}

// A linger far longer than the test makes the outcome independent of
// timing: streaming chunks wait, the first other event commits them all.
func TestLingerSharesOneCommit(t *testing.T) {
	st := &countingEvents{memEvents: newMemEvents("s-1", "s-2")}
	l := newLog(t, st, eventlog.WithLinger(time.Hour))
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		for _, sid := range []string{"s-1", "s-2"} {
			if _, err := l.Enqueue(ctx, sid, "message.delta", map[string]int{"i": i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := l.Append(ctx, "s-1", "turn.done", map[string]string{"reason": "complete"}); err != nil {
		t.Fatal(err)
	}
	if n := st.commits.Load(); n != 1 {
		t.Errorf("%d transactions for 201 events, want 1 (the chunks wait for the linger, turn.done commits them)", n)
	}
	for sid, n := range map[string]int{"s-1": 101, "s-2": 100} {
		evs, _ := st.ReadEvents(ctx, sid, 0, 0)
		if len(evs) != n {
			t.Errorf("%s: %d stored, want %d", sid, len(evs), n)
		}
	}
}

func TestLingerZeroCommitsAtOnce(t *testing.T) {
	st := &countingEvents{memEvents: newMemEvents("s-1")}
	l := newLog(t, st, eventlog.WithLinger(0))
	wait, err := l.Enqueue(context.Background(), "s-1", "message.delta", map[string]int{"i": 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil { // would block for the linger if there was one
		t.Fatal(err)
	}
}

func TestLingeringChunksCommitOnClose(t *testing.T) {
	st := &countingEvents{memEvents: newMemEvents("s-1")}
	l := eventlog.New(st, eventlog.WithLinger(time.Hour))
	for i := 0; i < 5; i++ {
		if _, err := l.Enqueue(context.Background(), "s-1", "tool.progress", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if evs, _ := st.ReadEvents(context.Background(), "s-1", 0, 0); len(evs) != 5 {
		t.Errorf("%d stored after Close, want 5", len(evs))
	}
}

// Wake makes the subscriptions of one log read what another writer
// committed to the shared store (a second daemon).
func TestWakeReadsAnotherWritersEvents(t *testing.T) {
	st := newMemEvents("s-1")
	writer := newLog(t, st)
	reader := newLog(t, st)
	appendN(t, writer, "s-1", 3)
	sub, err := reader.Subscribe(context.Background(), "s-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	r := startReader(t, sub, 1, false)
	r.waitFor(3, 30*time.Second)
	appendN(t, writer, "s-1", 7)
	reader.Wake("s-1", 10)
	r.waitFor(10, 30*time.Second)
	reader.Wake("s-1", 10) // a duplicate wake-up delivers nothing twice
	reader.Wake("s-unknown", 5)
	appendN(t, writer, "s-1", 2)
	reader.Wake("s-1", 12)
	r.waitFor(12, 30*time.Second)
	sub.Close()
	<-r.done
	r.check(12)
}
