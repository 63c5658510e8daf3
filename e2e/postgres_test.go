package e2e

import (
	"context"
	"testing"
	"time"

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

	// Jobs run on River in the same database.
	var sched struct {
		JobID string `json:"jobId"`
	}
	if err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@every 1s", "task": "hello", "workdir": t.TempDir()}, &sched); err != nil {
		t.Fatal(err)
	}
	var now struct {
		SessionID string `json:"sessionId"`
		Status    string `json:"status"`
	}
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": sched.JobID}, &now); err != nil || now.Status != "ok" {
		t.Fatalf("job.runNow on Postgres: %+v %v", now, err)
	}
	var river int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&river); err != nil {
		t.Fatalf("River's tables are not in the store's schema: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var list struct {
			Jobs []map[string]any `json:"jobs"`
		}
		c.Call(ctx, "job.list", map[string]any{}, &list)
		if len(list.Jobs) == 1 && list.Jobs[0]["lastStatus"] == "ok" && list.Jobs[0]["lastSessionId"] != now.SessionID {
			break // a scheduled fire ran after the manual one
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled fire on Postgres within 15 s: %v", list.Jobs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
