package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPostgresScaleOutModeAndRecovery: session state under the lease, on 3
// daemons. Plan mode set through B on a session A owns still holds after
// kill -9 of A, when B takes the session over (read from the store, not a
// cache): a write is refused with mode_denied. A restart of daemon C while
// a turn runs on A closes nothing of A's (start-up recovery touches only
// sessions whose lease expired): the turn ends when a client interrupts
// it, with one turn.done that is not synthetic.
func TestPostgresScaleOutModeAndRecovery(t *testing.T) {
	dsn, procs := startCluster(t, 3)
	db := clusterDB(t, dsn)
	a, b := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)
	ctx := context.Background()
	wd := t.TempDir()
	planned := createSession(t, a, map[string]any{"workdir": wd})
	if err := b.Call(ctx, "session.setMode", map[string]any{"sessionId": planned, "mode": "plan"}, nil); err != nil {
		t.Fatalf("session.setMode via B: %v", err)
	}

	// A turn running on A while C restarts.
	running := createSession(t, a, nil)
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := a.Call(ctx, "session.prompt", map[string]any{"sessionId": running, "text": "slow"}, &turn); err != nil {
		t.Fatal(err)
	}
	started := func() bool {
		for _, e := range storedEvents(t, db, running) {
			if e.kind == "message.delta" {
				return true
			}
		}
		return false
	}
	scaleWaitFor(t, "the slow turn streams on A", started)
	procs[2].kill()
	procs[2] = runClusterProc(t, procs[2].home, dsn)
	c := dialInfo(t, procs[2].info)
	time.Sleep(2 * clusterLease / 3) // C's start-up recovery and a sweep
	for _, e := range storedEvents(t, db, running) {
		if e.kind == "turn.done" {
			t.Fatalf("restarting C closed the turn running on A: %+v", e)
		}
	}
	if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": running}, nil); err != nil {
		t.Fatalf("session.interrupt via C: %v", err)
	}
	var dones []storedEvent
	scaleWaitFor(t, "the interrupted turn's turn.done", func() bool {
		dones = nil
		for _, e := range storedEvents(t, db, running) {
			if e.kind == "turn.done" {
				dones = append(dones, e)
			}
		}
		return len(dones) > 0
	})
	// Once the session's open-turn record is gone no daemon's recovery
	// can close the turn again: only then is one turn.done the last word.
	scaleWaitFor(t, "the interrupted turn's open-turn record to go", func() bool {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM settings WHERE namespace = 'session.openTurns' AND key = $1`, running).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if evs := storedEvents(t, db, running); countKind(evs, "turn.done") != 1 || dones[0].turnID != turn.TurnID || dones[0].synth || dones[0].reason != "interrupted" {
		t.Fatalf("turn.done of the interrupted turn: %+v (%d in all)", dones, countKind(evs, "turn.done"))
	}

	// kill -9 of A: B takes the planned session over; plan mode holds.
	procs[0].kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := b.Call(ctx, "session.prompt", map[string]any{"sessionId": planned, "text": "write"}, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prompt via B after A died: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var evs []storedEvent
	scaleWaitFor(t, "the write turn on B", func() bool {
		evs = storedEvents(t, db, planned)
		return countKind(evs, "turn.done") == 1
	})
	denied := 0
	var code string
	if err := db.QueryRow(ctx, `SELECT count(*), COALESCE(max(payload->>'code'), '') FROM events WHERE session_id = $1 AND kind = 'error'`, planned).Scan(&denied, &code); err != nil {
		t.Fatal(err)
	}
	if denied != 1 || code != "mode_denied" {
		t.Fatalf("plan mode after the takeover: %d error events, code %q; events %+v", denied, code, evs)
	}
	if _, err := os.Stat(filepath.Join(wd, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("the session wrote a file in plan mode after moving to B")
	}
}

func countKind(evs []storedEvent, kind string) int {
	n := 0
	for _, e := range evs {
		if e.kind == kind {
			n++
		}
	}
	return n
}
