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

// maxGoroutinesWatching is issue 12's bound: the goroutines that 2,000
// watched sessions may cost in this (in-process) daemon, all together. The
// facade reads every watched session on one multiplexed SubscribeSessions
// stream and the runtime serves it with two goroutines and an event log
// cursor (no goroutine) per watch, so the figure does not grow with the
// number of sessions (a goroutine per watch would be 2,000 over).
const maxGoroutinesWatching = 200

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
	// Idle: another connection watches one session, so the facade's
	// multiplexed stream is open already (its fixed goroutines are counted
	// here, not per watch).
	idle := goroutinesSettled(func(int) bool { return true })

	wd := t.TempDir()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, watchedSessions)
	next := make(chan int, watchedSessions)
	created := make(chan string, watchedSessions)
	for i := 0; i < watchedSessions; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				var res struct {
					SessionID string `json:"sessionId"`
				}
				if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd}, &res); err != nil {
					errs <- err
					return
				}
				created <- res.SessionID
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("session.create within the cap: %v", err)
	}
	watching := goroutinesSettled(func(int) bool { return true }) - idle
	t.Logf("goroutines for %d watched sessions on one connection: %d above idle (%.3f each; issue 12's target: < %d in all)",
		watchedSessions, watching, float64(watching)/watchedSessions, maxGoroutinesWatching)
	if watching >= maxGoroutinesWatching {
		t.Errorf("%d goroutines for %d watched sessions, want < %d in all (issue 12)", watching, watchedSessions, maxGoroutinesWatching)
	}

	// The watches are live: a turn of the first and of the last session
	// created reaches the connection.
	close(created)
	var ids []string
	for id := range created {
		ids = append(ids, id)
	}
	promptComplete(t, c, ids[0], "hello")
	promptComplete(t, c, ids[len(ids)-1], "hello")

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

// TestCloseEndsTheWatch (issue 38): a connection stops watching the
// sessions it closes, so one long-lived connection creates and closes
// more sessions than its cap (5,000 past the default 4,096) with no
// refusal; a session closed mid-turn still sends its turn.done first.
func TestCloseEndsTheWatch(t *testing.T) {
	const sessions = 5000
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()

	id := createSession(t, c, nil)
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(id), "message.delta", 1)
	if err := c.Call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	done := collect(t, c.Events(id), "turn.done", 1)
	if p, _ := done[len(done)-1]["payload"].(map[string]any); p["reason"] != "interrupted" {
		t.Fatalf("the closed session's turn.done: %v, want reason interrupted", done[len(done)-1])
	}

	wd := t.TempDir()
	next := make(chan int, sessions)
	for i := range sessions {
		next <- i
	}
	close(next)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				var res struct {
					SessionID string `json:"sessionId"`
				}
				if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd}, &res); err != nil {
					errs <- fmt.Errorf("session.create: %w", err)
					return
				}
				if err := c.Call(ctx, "session.close", map[string]any{"sessionId": res.SessionID}, nil); err != nil {
					errs <- fmt.Errorf("session.close: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating and closing %d sessions on one connection: %v", sessions, err)
	}
	// Still room: the next session is created and runs a turn.
	promptComplete(t, c, createSession(t, c, map[string]any{"workdir": wd}), "hello")
}

// TestDeleteSavedEndsTheWatch: a session watched again after its close
// (session.resume) and then removed by session.deleteSaved by workdir is
// no longer watched: the connection, at its cap, can watch another.
func TestDeleteSavedEndsTheWatch(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{MaxWatchedSessions: 2})
	c := helloWS(t, d)
	ctx := context.Background()
	wd := t.TempDir()
	gone := createSession(t, c, map[string]any{"workdir": wd})
	createSession(t, c, nil)
	if err := c.Call(ctx, "session.close", map[string]any{"sessionId": gone}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": gone}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd}, nil); err == nil || !err.HasCode("overloaded") {
		t.Fatalf("session.create at the cap of 2 watched sessions: %v, want overloaded", err)
	}
	var res struct {
		Deleted int `json:"deleted"`
	}
	if err := c.Call(ctx, "session.deleteSaved", map[string]any{"workdir": wd}, &res); err != nil || res.Deleted != 1 {
		t.Fatalf("session.deleteSaved by workdir: %d deleted, %v; want 1", res.Deleted, err)
	}
	promptComplete(t, c, createSession(t, c, nil), "hello")
}
