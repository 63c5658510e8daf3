package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// Past its cap of watched sessions a connection gets overloaded, naming
// the limit, and nothing is created; the limits are advertised in hello.
func TestWatchedSessionsCap(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{MaxWatchedSessions: 3})
	c := helloWS(t, d)
	defer c.Close()
	var hello struct {
		Limits map[string]float64 `json:"limits"`
	}
	if err := c.Call(context.Background(), "system.hello", map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}, &hello); err == nil {
		t.Fatal("a second hello on one connection was accepted")
	}
	other := dialWS(t, d)
	defer other.Close()
	if err := other.Call(context.Background(), "system.hello", map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}, &hello); err != nil {
		t.Fatal(err)
	}
	if hello.Limits["maxWatchedSessions"] != 3 || hello.Limits["maxConnections"] <= 0 || hello.Limits["maxInFlight"] <= 0 {
		t.Fatalf("hello limits = %v", hello.Limits)
	}
	ids := []string{}
	for i := 0; i < 3; i++ {
		ids = append(ids, createSession(t, c, nil))
	}
	var res map[string]any
	err := c.Call(context.Background(), "session.create", map[string]any{"workdir": t.TempDir()}, &res)
	if err == nil || err.StringCode() != "overloaded" {
		t.Fatalf("4th watched session: %v, want overloaded", err)
	}
	data := err.Data
	if data["limit"] != "maxWatchedSessions" || data["max"] != int64(3) {
		t.Fatalf("overloaded data = %v, want limit maxWatchedSessions, max 3", data)
	}
	// A watched session still works; another connection is not affected.
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": ids[0], "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(ids[0]), "turn.done", 1)
	createSession(t, other, nil)
}

// Past the cap of authenticated connections, hello gets overloaded.
func TestConnectionsCap(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{MaxConnections: 2})
	a, b := helloWS(t, d), helloWS(t, d)
	defer a.Close()
	defer b.Close()
	c := dialWS(t, d)
	defer c.Close()
	err := c.Call(context.Background(), "system.hello", map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}, nil)
	if err == nil || err.StringCode() != "overloaded" || err.Data["limit"] != "maxConnections" {
		t.Fatalf("3rd connection's hello: %v, want overloaded naming maxConnections", err)
	}
	a.Close()
	// A closed connection frees its place (eventually: the close is async).
	for i := 0; ; i++ {
		c2 := dialWS(t, d)
		err := c2.Call(context.Background(), "system.hello", map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}, nil)
		c2.Close()
		if err == nil {
			break
		}
		if i > 200 {
			t.Fatalf("hello after a close: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling an asynchronous close, not asserting on time
	}
}
