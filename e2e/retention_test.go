package e2e

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestIdleSessionsLeaveTheHeap: a daemon (in this process) serves many
// sessions whose prompt is 1 MiB (its turn.started and message.user events
// each carry it), over one WebSocket connection that then closes; once
// they are idle the heap is back within a tenth of the daemon's idle heap
// (measured after one such session, so that what is made once is counted
// there). The sessions stay stored: the log still returns a prompt.
//
// TRELLIS_RETENTION_SESSIONS sets how many (default 32; issue 38's
// acceptance asks 1,000, some 3 GiB written to SQLite, so not by default).
func TestIdleSessionsLeaveTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1 MiB prompts")
	}
	n := 32
	if s := os.Getenv("TRELLIS_RETENTION_SESSIONS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("TRELLIS_RETENTION_SESSIONS=%q: want a positive number", s)
		}
	}
	d := startDaemon(t)
	ctx := context.Background()
	prompt := "hello " + strings.Repeat("x", 1<<20)
	run := func(c *wsClient) string {
		id := createSession(t, c, nil)
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": prompt}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.done", 1)
		return id
	}
	admin := dialGRPC(t, d) // to count the WebSocket connections
	warm := helloWS(t, d)
	first := run(warm)
	warm.Close()
	warm.forget()
	idle := settledHeap(t, admin)

	c := helloWS(t, d)
	for range n {
		run(c)
	}
	c.Close()
	c.forget()
	after := settledHeap(t, admin)
	grown := after - idle
	t.Logf("%d idle sessions of a 1 MiB prompt: the heap went from %d KiB (idle, after one) to %d KiB (%+.1f%%)",
		n, idle>>10, after>>10, 100*float64(grown)/float64(idle))
	if grown > idle/10 {
		t.Errorf("the heap grew by %d KiB over %d idle sessions, more than a tenth of the idle heap (%d KiB): something keeps their prompts",
			grown>>10, n, idle>>10)
	}

	// Their events are kept in the store: the first page of the first
	// session's log starts with its turn.started, prompt and all.
	check := helloWS(t, d)
	var res struct {
		Events []struct {
			Kind    string         `json:"kind"`
			Payload map[string]any `json:"payload"`
		} `json:"events"`
	}
	if err := check.Call(ctx, "session.resume", map[string]any{"sessionId": first}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Events) == 0 || res.Events[0].Kind != "turn.started" || res.Events[0].Payload["prompt"] != prompt {
		t.Fatalf("session.resume of the first session does not start with its turn.started and prompt (%d events)", len(res.Events))
	}
}

// settledHeap waits until the daemon has no WebSocket connection left and
// returns the live heap after two collections.
func settledHeap(t *testing.T, admin client) int64 {
	t.Helper()
	waitConnections(t, admin, 0)
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
