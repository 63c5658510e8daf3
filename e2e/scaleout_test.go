package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// clusterLease is the lease of the multi-daemon tests: short, so that a
// takeover after a kill -9 comes quickly.
const clusterLease = 3 * time.Second

// startClusterProc runs a trellisd child process with its own home on the
// shared PostgreSQL database dsn.
func startClusterProc(t *testing.T, dsn string, extra ...string) *proc {
	t.Helper()
	return runClusterProc(t, t.TempDir(), dsn, extra...)
}

// runClusterProc starts (or restarts) the daemon of home.
func runClusterProc(t *testing.T, home, dsn string, extra ...string) *proc {
	t.Helper()
	return startProc(t, home, append([]string{"--store", dsn, "--lease", clusterLease.String()}, extra...)...)
}

// startCluster starts n daemons on one fresh database, in parallel.
func startCluster(t *testing.T, n int) (string, []*proc) {
	t.Helper()
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	procs := make([]*proc, n)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i] = startClusterProc(t, dsn)
		}()
	}
	wg.Wait()
	for _, p := range procs {
		if p == nil {
			t.FailNow()
		}
		if p.info.Token != procs[0].info.Token {
			t.Fatalf("daemons of one database have different tokens")
		}
	}
	return dsn, procs
}

// checkSeqs fails unless evs are seq 1..len(evs), once each.
func checkSeqs(t *testing.T, who string, evs []map[string]any) {
	t.Helper()
	for i, ev := range evs {
		if seqOf(ev) != int64(i+1) {
			t.Fatalf("%s: seq %d at position %d (want %d): kinds %v", who, seqOf(ev), i, i+1, eventKinds(evs))
		}
	}
}

// TestPostgresScaleOutThreeDaemons: a session created on A, prompted via B and
// watched on C; every client sees the same events, seq 1..N once each.
// Then two clients prompt it at once through B and C: both turns run, one
// queued, no error.
func TestPostgresScaleOutThreeDaemons(t *testing.T) {
	_, procs := startCluster(t, 3)
	a, b, c := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info), dialInfo(t, procs[2].info)
	ctx := context.Background()

	id := createSession(t, a, nil) // a watches from seq 0
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatalf("session.resume via C: %v", err)
	}
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := b.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, &turn); err != nil {
		t.Fatalf("session.prompt via B: %v", err)
	}
	var ref []map[string]any
	for i, cl := range []*grpcClient{a, b, c} {
		evs := collect(t, cl.Events(id), "turn.done", 1)
		who := fmt.Sprintf("client of daemon %c", 'A'+i)
		checkSeqs(t, who, evs)
		if p := payloadOf(evs[len(evs)-1]); p["turnId"] != turn.TurnID || p["reason"] != "complete" {
			t.Fatalf("%s: turn.done %v", who, p)
		}
		if ref == nil {
			ref = evs
		} else if fmt.Sprint(eventKinds(evs)) != fmt.Sprint(eventKinds(ref)) {
			t.Fatalf("%s saw %v, daemon A's client %v", who, eventKinds(evs), eventKinds(ref))
		}
	}
	n := len(ref)
	t.Logf("one turn: %d events, seq 1..%d on all three daemons", n, n)

	// Two prompts at once through B and C.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, cl := range []*grpcClient{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cl.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello again"}, nil); err != nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent prompt %d: %v", i, err)
		}
	}
	for i, cl := range []*grpcClient{a, b, c} {
		evs := collect(t, cl.Events(id), "turn.done", 2)
		for j, ev := range evs {
			if seqOf(ev) != int64(n+1+j) {
				t.Fatalf("client of daemon %c: seq %d at position %d after seq %d: %v", 'A'+i, seqOf(ev), j, n, eventKinds(evs))
			}
		}
		queued := 0
		for _, ev := range evs {
			if ev["kind"] == "turn.queued" {
				queued++
			}
			if ev["kind"] == "turn.done" && payloadOf(ev)["reason"] != "complete" {
				t.Fatalf("client of daemon %c: %v", 'A'+i, ev)
			}
		}
		if queued != 1 {
			t.Fatalf("client of daemon %c: %d turn.queued, want 1: %v", 'A'+i, queued, eventKinds(evs))
		}
	}
}
