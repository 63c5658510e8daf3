package e2e

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// watchedSessions is issue 12's case: one connection watching 2,000
// sessions.
const watchedSessions = 2000

// maxGoroutinesPerWatch bounds what one watched session may cost in
// goroutines in this (in-process) daemon: today a shared upstream stream per
// session (the facade's reader, gRPC's stream watcher, the runtime's handler
// and the event log's subscription). Issue 12's target is under 200 for all
// 2,000 together, which needs one multiplexed stream; the test logs the
// figure and fails on anything beyond the per-session bound (a leak, a
// goroutine per event).
const maxGoroutinesPerWatch = 6

func goroutinesSettled(want func(n int) bool) int {
	var n int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		runtime.GC()
		if n = runtime.NumGoroutine(); want(n) {
			break
		}
	}
	return n
}

// TestTwoThousandWatchedSessionsAndTheCap: one WebSocket connection creates
// (and so watches) 2,000 sessions with the cap set at 2,000; the next
// session.create and a session.resume of another session are refused with
// overloaded naming maxWatchedSessions, and closing the connection gives
// every goroutine back.
func TestTwoThousandWatchedSessionsAndTheCap(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{MaxWatchedSessions: watchedSessions})
	other := helloWS(t, d)
	otherID := createSession(t, other, nil)
	c := helloWS(t, d)
	idle := goroutinesSettled(func(int) bool { return true })

	wd := t.TempDir()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, watchedSessions)
	next := make(chan int, watchedSessions)
	for i := 0; i < watchedSessions; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("session.create within the cap: %v", err)
	}
	watching := goroutinesSettled(func(int) bool { return true }) - idle
	t.Logf("goroutines for %d watched sessions on one connection: %d above idle (%.2f each; issue 12's target: < 200 in all)",
		watchedSessions, watching, float64(watching)/watchedSessions)
	if watching > maxGoroutinesPerWatch*watchedSessions {
		t.Errorf("%d goroutines for %d watched sessions, over %d each", watching, watchedSessions, maxGoroutinesPerWatch)
	}

	// Past the cap: refused before anything is created or resumed.
	for _, call := range []struct {
		method string
		params map[string]any
	}{
		{"session.create", map[string]any{"workdir": wd}},
		{"session.resume", map[string]any{"sessionId": otherID}},
		{"session.prompt", map[string]any{"sessionId": otherID, "text": "hello"}},
	} {
		err := c.Call(ctx, call.method, call.params, nil)
		if err == nil || !err.HasCode("overloaded") || err.Data["limit"] != "maxWatchedSessions" || fmt.Sprint(err.Data["max"]) != fmt.Sprint(watchedSessions) {
			t.Fatalf("%s past the cap: %+v, want overloaded naming maxWatchedSessions and its max", call.method, err)
		}
	}
	var list struct {
		Sessions []struct{} `json:"sessions"`
	}
	if err := other.Call(ctx, "session.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != watchedSessions+1 {
		t.Fatalf("%d sessions listed, want %d: a refused create must not create", len(list.Sessions), watchedSessions+1)
	}

	// Closing the connection ends every watch.
	c.Close()
	after := goroutinesSettled(func(n int) bool { return n <= idle+20 })
	if after > idle+20 {
		t.Fatalf("goroutines after the connection closed: %d, idle was %d", after, idle)
	}
}
