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
// timing: streaming chunks that follow one within the linger wait, the
// first other event commits them all.
func TestLingerSharesOneCommit(t *testing.T) {
	st := &countingEvents{memEvents: newMemEvents("s-1", "s-2")}
	l := newLog(t, st, eventlog.WithLinger(time.Hour))
	ctx := context.Background()
	warmUp(t, l, st.memEvents)
	st.commits.Store(0)
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

// A streaming chunk waits for company only if another came within the
// linger before it, of any session; a lonely one (a model's paced stream
// alone on the daemon) commits at once. With a linger of an hour, a chunk
// that waited would block the test: the outcome does not depend on timing.
func TestLonelyChunkCommitsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		before    []string // sessions whose chunk commits before the probe's
		doneFirst bool     // a turn.done (not a chunk) commits before the probe
		probe     string
		waits     bool
	}{
		{name: "first chunk of the log", probe: "s-1"},
		{name: "after a chunk of its own session", before: []string{"s-1"}, probe: "s-1", waits: true},
		{name: "after another session's chunk", before: []string{"s-2"}, probe: "s-1", waits: true},
		{name: "after a turn.done only", doneFirst: true, probe: "s-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &countingEvents{memEvents: newMemEvents("s-1", "s-2")}
			l := newLog(t, st, eventlog.WithLinger(time.Hour))
			ctx := context.Background()
			for _, sid := range tc.before {
				wait, err := l.Enqueue(ctx, sid, "message.delta", map[string]int{"i": 0})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := wait(); err != nil { // lonely: at once
					t.Fatal(err)
				}
			}
			if tc.doneFirst {
				if _, err := l.Append(ctx, "s-2", "turn.done", map[string]string{"reason": "complete"}); err != nil {
					t.Fatal(err)
				}
			}
			before := st.commits.Load()
			wait, err := l.Enqueue(ctx, tc.probe, "message.delta", map[string]int{"i": 1})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.waits {
				if _, err := wait(); err != nil { // would block for the hour
					t.Fatal(err)
				}
				return
			}
			// It waits: the next other event commits it, in one transaction.
			if _, err := l.Append(ctx, tc.probe, "turn.done", map[string]string{"reason": "complete"}); err != nil {
				t.Fatal(err)
			}
			if _, err := wait(); err != nil {
				t.Fatal(err)
			}
			if n := st.commits.Load() - before; n != 1 {
				t.Errorf("%d transactions for the chunk and turn.done, want 1 (the chunk waits for company)", n)
			}
		})
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

// warmUp commits one streaming chunk of a session of its own ("warm-up",
// added to m) on l: the first chunk is lonely and commits at once, and the
// chunks the test enqueues next have company, so they wait for the linger.
func warmUp(t *testing.T, l *eventlog.Log, m *memEvents) {
	t.Helper()
	m.mu.Lock()
	m.sessions["warm-up"] = nil
	m.mu.Unlock()
	wait, err := l.Enqueue(context.Background(), "warm-up", "message.delta", map[string]int{"i": 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestLingeringChunksCommitOnClose(t *testing.T) {
	st := &countingEvents{memEvents: newMemEvents("s-1")}
	l := eventlog.New(st, eventlog.WithLinger(time.Hour))
	warmUp(t, l, st.memEvents)
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
