package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/runtime/eventlog"
)

// TestIdleSessionsHoldNoPayload: many sessions each append one large event
// and go idle; the log then keeps none of their payloads (heap back near
// where it started) and at most WithIdleSessions of their states, while a
// watched session stays and keeps receiving, and an evicted session's next
// event continues its numbering from the store.
//
// TRELLIS_RETENTION_SESSIONS sets how many sessions (default 64; issue 38's
// acceptance asks 1,000, a gigabyte written to SQLite, so not by default).
func TestIdleSessionsHoldNoPayload(t *testing.T) {
	const size, idle = 1 << 20, 8
	n := 64
	if s := os.Getenv("TRELLIS_RETENTION_SESSIONS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("TRELLIS_RETENTION_SESSIONS=%q: want a positive number", s)
		}
	}
	ids := sessionIDs(n)
	st := openStore(t, append(ids, "watched")...)
	l := newLog(t, st, eventlog.WithIdleSessions(idle))
	ctx := context.Background()

	sub, err := l.Subscribe(ctx, "watched", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := l.Append(ctx, "watched", "note", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}

	payload := json.RawMessage(fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", size)))
	base := heapAlloc()
	for _, id := range ids {
		ev, err := l.Append(ctx, id, "note", payload)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != 1 {
			t.Fatalf("%s: seq %d, want 1", id, ev.Seq)
		}
	}
	got := heapAlloc() - base
	if got > 16<<20 {
		t.Fatalf("after %d idle sessions of one %d-byte event the heap grew by %d bytes; want their payloads released", n, size, got)
	}
	t.Logf("%d sessions of one %d-byte event, then idle: the heap grew by %d KiB (from %d KiB)", n, size, got>>10, base>>10)
	// The watched session and at most idle+1 others (the last made).
	if got := l.Sessions(); got > idle+2 {
		t.Fatalf("the log keeps %d sessions, want at most %d (the watched one and %d idle)", got, idle+2, idle+1)
	}

	// An evicted session numbers on from the store.
	ev, err := l.Append(ctx, ids[0], "note", map[string]int{"n": 2})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 2 {
		t.Fatalf("the next event of an evicted session has seq %d, want 2", ev.Seq)
	}
	checkStored(t, st, ids[0], 2)

	// The watched session was never evicted: live delivery goes on.
	if _, err := l.Append(ctx, "watched", "note", map[string]int{"n": 2}); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for len(seqs) < 2 {
		it, ok := <-sub.Items()
		if !ok {
			t.Fatal(sub.Err())
		}
		if it.Event != nil {
			seqs = append(seqs, it.Event.Seq)
		}
	}
	if seqs[0] != 1 || seqs[1] != 2 {
		t.Fatalf("the watched session delivered seqs %v, want [1 2]", seqs)
	}
}

// TestCommittedEventsLeaveNoPayload: with no sweep due (the default idle
// allowance), a session's committed last event is not kept by the log.
func TestCommittedEventsLeaveNoPayload(t *testing.T) {
	const n, size = 32, 1 << 20
	ids := sessionIDs(n)
	l := newLog(t, openStore(t, ids...))
	ctx := context.Background()
	payload := json.RawMessage(fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", size)))
	base := heapAlloc()
	for _, id := range ids {
		if _, err := l.Append(ctx, id, "note", payload); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.Sessions(); got != n {
		t.Fatalf("the log keeps %d sessions, want %d (below the idle allowance nothing is swept)", got, n)
	}
	if got := heapAlloc() - base; got > 12<<20 {
		t.Fatalf("after %d sessions of one %d-byte committed event the heap grew by %d bytes; want their payloads released", n, size, got)
	}
}

func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSweepKeepsNumbering: writers append to many sessions at once while
// new sessions keep sweeping the idle ones out (no idle allowance): every
// session's stored events are still 1..n, no seq given twice, none lost.
func TestSweepKeepsNumbering(t *testing.T) {
	const sessions, writers, rounds = 40, 8, 30
	ids := sessionIDs(sessions)
	st := newMemEvents(ids...)
	l := newLog(t, st, eventlog.WithIdleSessions(0))
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i := range ids {
					id := ids[(i+w*5)%sessions]
					if _, err := l.Append(ctx, id, "note", delta{Writer: w, N: r}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		checkStored(t, st, id, writers*rounds)
	}
	if got := l.Sessions(); got > sessions {
		t.Fatalf("the log keeps %d sessions, want at most %d", got, sessions)
	}
}
