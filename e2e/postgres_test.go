package e2e

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestPostgresStore runs a daemon on PostgreSQL (the server named by
// TRELLIS_TEST_POSTGRES, a fresh schema) through a "hello" turn over gRPC,
// and checks that the daemon says so and that the turn's events are in the
// database.
func TestPostgresStore(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	d := startDaemonWith(t, daemon.Config{Store: dsn})
	c := dialGRPC(t, d)
	ctx := context.Background()

	var info struct {
		Store string `json:"store"`
	}
	if err := c.Call(ctx, "system.info", map[string]any{}, &info); err != nil {
		t.Fatal(err)
	}
	if info.Store != "postgres" {
		t.Fatalf("system.info store = %q, want postgres", info.Store)
	}

	id := createSession(t, c, nil)
	var res struct {
		TurnID string `json:"turnId"`
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, &res); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.done", 1)
	for i, ev := range evs {
		if seqOf(ev) != int64(i+1) {
			t.Fatalf("seq %d at position %d: %v", seqOf(ev), i, eventKinds(evs))
		}
	}
	done := evs[len(evs)-1]
	if p := payloadOf(done); p["reason"] != "complete" || p["turnId"] != res.TurnID {
		t.Fatalf("turn.done = %v, kinds %v", p, eventKinds(evs))
	}

	// Events are stored before they are sent, so they are all there now.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var kind string
	if err := conn.QueryRow(ctx, `SELECT kind FROM events WHERE session_id = $1 AND seq = $2`, id, seqOf(done)).Scan(&kind); err != nil || kind != "turn.done" {
		t.Fatalf("event %s/%d in PostgreSQL: kind %q, %v; want turn.done", id, seqOf(done), kind, err)
	}
}
