package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// TestDiskFullMidTurnReachesTheLiveClient runs the daemon's SQLite store on
// a small tmpfs and fills it in the middle of a streaming turn: the watching
// WebSocket client receives error{store_unavailable} and turn.done{error},
// sent from memory (unstored: true), with no gap in the seqs it saw;
// session.list says the session is idle; once space is freed the daemon
// stores those events by itself, under the seqs the client saw, and the log
// has no gap.
func TestDiskFullMidTurnReachesTheLiveClient(t *testing.T) {
	mnt := mountTmpfs(t, 16<<20)
	home := filepath.Join(mnt, "home")
	d := startDaemonHome(t, home, daemon.Config{})
	ctx := context.Background()
	c := helloWS(t, d)
	id := createSession(t, c, nil)
	promptComplete(t, c, id, "hello")

	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, &turn); err != nil {
		t.Fatal(err)
	}
	seen := collect(t, c.Events(id), "message.delta", 20)
	filler := fillDisk(t, mnt)
	full := time.Now()

	var errEv, doneEv map[string]any
	deadline := time.After(60 * time.Second) // generous: the issue asks for 2 s, measured below
	for doneEv == nil {
		select {
		case ev := <-c.Events(id):
			seen = append(seen, ev)
			p := payloadOf(ev)
			switch {
			case ev["kind"] == "error" && p["code"] == "store_unavailable":
				errEv = ev
			case ev["kind"] == "turn.done" && p["turnId"] == turn.TurnID:
				doneEv = ev
			}
		case <-deadline:
			t.Fatalf("no turn.done for turn %s within 60 s of the disk filling up; got %v", turn.TurnID, eventKinds(seen))
		}
	}
	t.Logf("error + turn.done reached the live client %v after the disk filled up", time.Since(full).Round(time.Millisecond))
	if errEv == nil {
		t.Fatalf("turn.done without an error{store_unavailable} before it: %v", eventKinds(seen))
	}
	if payloadOf(doneEv)["reason"] != "error" {
		t.Errorf("turn.done %v, want reason error", doneEv)
	}
	if errEv["unstored"] != true || doneEv["unstored"] != true {
		t.Errorf("error %v and turn.done %v are not marked unstored", errEv, doneEv)
	}
	if msg := fmt.Sprint(payloadOf(errEv)["message"]); !mentionsStorage(msg) {
		t.Errorf("error message %q does not say the store cannot write", msg)
	}
	for i := 1; i < len(seen); i++ {
		if seqOf(seen[i]) != seqOf(seen[i-1])+1 {
			t.Fatalf("the live client saw seq %d after %d", seqOf(seen[i]), seqOf(seen[i-1]))
		}
	}
	waitIdle(t, c, id)

	// Space again: the held events are stored without any new call.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	stored := waitStored(t, c, id, seqOf(doneEv))
	for _, ev := range stored {
		if _, ok := ev["unstored"]; ok {
			t.Errorf("a stored event carries unstored: %v", ev)
		}
	}
	if got := stored[seqOf(doneEv)-1]; got["kind"] != "turn.done" || payloadOf(got)["turnId"] != turn.TurnID {
		t.Errorf("stored seq %d is %v, the live client saw turn.done of %s there", seqOf(doneEv), got, turn.TurnID)
	}
	if got := stored[seqOf(errEv)-1]; got["kind"] != "error" {
		t.Errorf("stored seq %d is %v, the live client saw the error there", seqOf(errEv), got)
	}
	assertTurnsClosed(t, id, stored)
	d.Stop()
	assertIntegrity(t, filepath.Join(home, "trellis.db"))

	// A restart finds no turn left open (the record of open turns was
	// cleared once the store worked again): no second turn.done, and the
	// session takes a new turn.
	d2 := startDaemonHome(t, home, daemon.Config{})
	c2 := helloWS(t, d2)
	assertTurnsClosed(t, id, assertContiguous(t, c2, id))
	if err := c2.Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": seqOf(doneEv)}, nil); err != nil {
		t.Fatal(err)
	}
	promptComplete(t, c2, id, "hello")
	assertTurnsClosed(t, id, assertContiguous(t, c2, id))
}

// waitStored polls session.resume until the session's stored log reaches
// seq, and checks that its seqs are 1..N.
func waitStored(t *testing.T, c client, id string, seq int64) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs := assertContiguous(t, c, id)
		if int64(len(evs)) >= seq {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after space was freed the log ends at seq %d, the live client saw %d", len(evs), seq)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
