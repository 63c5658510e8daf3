package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// pruneScript writes a file on "write" (a checkpoint before the write and
// one at the turn's end) and runs a long turn on "slow turn".
const pruneScript = `{"steps":[
 {"match":"write","repeat":true,"tool_calls":[{"name":"write_file","arguments":{"path":"a.txt","content":"retained\n"}}]},
 {"match":"slow turn","text":"slowly","delaySec":60},
 {"after_tool":"write_file","text":"Done.","repeat":true}
]}`

type pruneResult struct {
	OlderThan  string `json:"olderThan"`
	KeepLatest int    `json:"keepLatest"`
	Per        string `json:"per"`
	DryRun     bool   `json:"dryRun"`
	Sessions   []struct {
		SessionID      string  `json:"sessionId"`
		Workdir        string  `json:"workdir"`
		LastActivityAt string  `json:"lastActivityAt"`
		Reason         string  `json:"reason"`
		Held           *string `json:"held"`
	} `json:"sessions"`
	Deleted         int   `json:"deleted"`
	CheckpointBytes int64 `json:"checkpointBytes"`
}

// pruned is the ids a session.prune answer lists, sorted, and which of
// them it held (id → why).
func (r pruneResult) pruned() ([]string, map[string]string) {
	var ids []string
	held := map[string]string{}
	for _, s := range r.Sessions {
		ids = append(ids, s.SessionID)
		if s.Held != nil {
			held[s.SessionID] = *s.Held
		}
	}
	slices.Sort(ids)
	return ids, held
}

// storedCheckpoints is how many checkpoints and blobs the store keeps of
// a session.
func storedCheckpoints(t *testing.T, st store.Store, id string) (checkpoints, blobs int) {
	t.Helper()
	cps, err := st.ListCheckpoints(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := st.ListBlobs(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return len(cps), len(bs)
}

// TestPrune: session.prune over gRPC, on sessions whose turns recorded
// checkpoints. With keepLatest 2 per workdir, a dry run lists the two
// older sessions of a workdir of five (one of them archived, which is
// neither listed nor counted) and the oldest session of a second workdir
// of three, which runs a turn and is held; it deletes nothing. The real run deletes
// the two with their checkpoints and blobs (the store keeps none), keeps
// the two newest, the archived one and the busy one with theirs; a second
// run deletes nothing more. A policy without a rule is invalid_params;
// an age rule keeps every recent session.
func TestPrune(t *testing.T) { testPrune(t, daemon.Config{}) }

// TestPrunePostgres is TestPrune on a daemon whose store is PostgreSQL
// (TRELLIS_TEST_POSTGRES, a fresh schema).
func TestPrunePostgres(t *testing.T) {
	testPrune(t, daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))})
}

func testPrune(t *testing.T, cfg daemon.Config) {
	ctx := context.Background()
	home := t.TempDir()
	d := startDaemonScript(t, home, cfg, pruneScript)
	st := openStore(t, cfg, home)
	c := helloWS(t, d)
	g := dialGRPC(t, d)

	wd, busyWd := t.TempDir(), t.TempDir()
	// Oldest activity first: each turn starts after the previous ended.
	busy := createSession(t, c, map[string]any{"workdir": busyWd, "mode": "auto"})
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": busy, "text": "slow turn"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(busy), "turn.started", 1)
	var ids []string // archived, old1, old2, new1, new2
	for range 5 {
		id := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
		runTurn(t, c, id, "write")
		ids = append(ids, id)
	}
	archived, old, kept := ids[0], ids[1:3], ids[3:]
	if err := c.Call(ctx, "session.archive", map[string]any{"sessionId": archived}, nil); err != nil {
		t.Fatal(err)
	}
	var newest []string // the busy workdir's two newest
	for range 2 {
		id := createSession(t, c, map[string]any{"workdir": busyWd, "mode": "auto"})
		runTurn(t, c, id, "write")
		newest = append(newest, id)
	}
	for _, id := range ids {
		if cps, blobs := storedCheckpoints(t, st, id); cps == 0 || blobs == 0 {
			t.Fatalf("session %s: %d checkpoints, %d blobs stored before the prune; want some", id, cps, blobs)
		}
	}

	wantIDs := slices.Sorted(slices.Values(append([]string{busy}, old...)))
	var dry pruneResult
	if err := g.Call(ctx, "session.prune", map[string]any{"keepLatest": 2, "dryRun": true}, &dry); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	got, held := dry.pruned()
	if !slices.Equal(got, wantIDs) || len(held) != 1 || !strings.Contains(held[busy], "turn is running") {
		t.Fatalf("dry run listed %v (held %v), want %v with %s held for its running turn", got, held, wantIDs, busy)
	}
	if !dry.DryRun || dry.Deleted != 0 || dry.CheckpointBytes <= 0 || dry.KeepLatest != 2 || dry.Per != "workdir" || dry.OlderThan != "" {
		t.Fatalf("dry run answered %+v", dry)
	}
	for _, s := range dry.Sessions {
		if s.SessionID == old[0] && (s.Reason != "not among the 2 latest of its workdir "+s.Workdir || s.LastActivityAt == "") {
			t.Errorf("dry run: %s listed with reason %q, last activity %q", s.SessionID, s.Reason, s.LastActivityAt)
		}
	}
	for _, id := range old {
		if cps, blobs := storedCheckpoints(t, st, id); cps == 0 || blobs == 0 {
			t.Fatalf("the dry run deleted session %s's checkpoints (%d left, %d blobs)", id, cps, blobs)
		}
		if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatalf("the dry run deleted session %s: %v", id, err)
		}
	}

	var real pruneResult
	if err := g.Call(ctx, "session.prune", map[string]any{"keepLatest": 2}, &real); err != nil {
		t.Fatalf("prune: %v", err)
	}
	got, held = real.pruned()
	if !slices.Equal(got, wantIDs) || len(held) != 1 || held[busy] == "" || real.Deleted != 2 || real.CheckpointBytes != dry.CheckpointBytes {
		t.Fatalf("prune listed %v (held %v), deleted %d, %d checkpoint bytes; want %v, %s held, 2 deleted, %d bytes",
			got, held, real.Deleted, real.CheckpointBytes, wantIDs, busy, dry.CheckpointBytes)
	}
	for _, id := range old {
		if cps, blobs := storedCheckpoints(t, st, id); cps != 0 || blobs != 0 {
			t.Errorf("deleted session %s: the store still keeps %d checkpoints and %d blobs", id, cps, blobs)
		}
		wantCode(t, c.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil), "not_found", id)
	}
	for _, id := range slices.Concat([]string{archived, busy}, newest, kept) {
		if err := c.Call(ctx, "checkpoint.list", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatalf("kept session %s: %v", id, err)
		}
		if id == busy {
			continue // its slow turn has not reached a checkpoint
		}
		if cps, blobs := storedCheckpoints(t, st, id); cps == 0 || blobs == 0 {
			t.Errorf("kept session %s: %d checkpoints, %d blobs left", id, cps, blobs)
		}
	}

	// Deleting again is harmless: nothing more goes.
	var again pruneResult
	if err := g.Call(ctx, "session.prune", map[string]any{"keepLatest": 2}, &again); err != nil {
		t.Fatal(err)
	}
	if got, _ := again.pruned(); again.Deleted != 0 || !slices.Equal(got, []string{busy}) {
		t.Fatalf("a second prune deleted %d and listed %v, want nothing but %s (held)", again.Deleted, got, busy)
	}
	// An age rule: every session here is recent.
	var young pruneResult
	if err := g.Call(ctx, "session.prune", map[string]any{"olderThan": "720h", "dryRun": true}, &young); err != nil {
		t.Fatal(err)
	}
	if len(young.Sessions) != 0 || young.OlderThan != "720h0m0s" || young.KeepLatest != 0 {
		t.Fatalf("olderThan 720h listed %+v", young)
	}
	// The same age in days, as people write it.
	if err := g.Call(ctx, "session.prune", map[string]any{"olderThan": "30d", "dryRun": true}, &young); err != nil {
		t.Fatal(err)
	}
	if len(young.Sessions) != 0 || young.OlderThan != "720h0m0s" {
		t.Fatalf("olderThan 30d listed %+v", young)
	}
	// No rule here nor in the daemon: refused, not "delete everything".
	wantCode(t, g.Call(ctx, "session.prune", map[string]any{"dryRun": true}, nil), "invalid_params", "no retention rule")
	wantCode(t, g.Call(ctx, "session.prune", map[string]any{"keepLatest": 0, "olderThan": "0"}, nil), "invalid_params", "no retention rule")
	wantCode(t, g.Call(ctx, "session.prune", map[string]any{"olderThan": "a month"}, nil), "invalid_params", "olderThan")
	wantCode(t, g.Call(ctx, "session.prune", map[string]any{"keepLatest": 1, "per": "owner"}, nil), "invalid_params", "per")
}

// TestRetentionSweep: a daemon started with --retain-latest 1 deletes, on
// its own, the older of two idle sessions of one workdir once the newer
// one exists, and keeps the newer one; session.prune without params
// applies the same policy.
func TestRetentionSweep(t *testing.T) {
	ctx := context.Background()
	d := startDaemonScript(t, t.TempDir(), daemon.Config{RetainLatest: 1, RetentionEvery: 50 * time.Millisecond}, pruneScript)
	c := helloWS(t, d)
	wd := t.TempDir()
	first := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
	runTurn(t, c, first, "write")
	second := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
	runTurn(t, c, second, "write")
	deadline := time.Now().Add(20 * time.Second)
	for c.Call(ctx, "session.resume", map[string]any{"sessionId": first}, nil) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the older session was still there 20 s after the newer one ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": second}, nil); err != nil {
		t.Fatalf("the newest session of the workdir was deleted: %v", err)
	}
	var res pruneResult
	if err := c.Call(ctx, "session.prune", map[string]any{"dryRun": true}, &res); err != nil {
		t.Fatal(err)
	}
	if res.KeepLatest != 1 || res.Per != "workdir" || len(res.Sessions) != 0 {
		t.Fatalf("session.prune with the daemon's policy answered %+v", res)
	}
}

// TestPruneTwoDaemonsPostgres: two daemons on one PostgreSQL store prune
// at once with the same policy. The idle session whose lease daemon A
// holds is deleted by A (B says it is live on another daemon); the closed
// one, whose lease nobody holds, is deleted by one of them; each session
// goes once, the newest stays, and neither call fails.
func TestPruneTwoDaemonsPostgres(t *testing.T) {
	ctx := context.Background()
	cfg := daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))}
	a := startDaemonScript(t, t.TempDir(), cfg, pruneScript)
	b := startDaemonScript(t, t.TempDir(), cfg, pruneScript)
	ca := helloWS(t, a)
	wd := t.TempDir()
	var ids []string // closed, idle on a, newest
	for range 3 {
		id := createSession(t, ca, map[string]any{"workdir": wd, "mode": "auto"})
		runTurn(t, ca, id, "write")
		ids = append(ids, id)
	}
	if err := ca.Call(ctx, "session.close", map[string]any{"sessionId": ids[0]}, nil); err != nil {
		t.Fatal(err)
	}
	results := make([]pruneResult, 2)
	errs := make(chan error, 2)
	for i, d := range []*daemon.Daemon{a, b} {
		g := dialGRPC(t, d)
		go func() {
			if err := g.Call(ctx, "session.prune", map[string]any{"keepLatest": 1}, &results[i]); err != nil {
				errs <- err
				return
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("session.prune: %v", err)
		}
	}
	if n := results[0].Deleted + results[1].Deleted; n != 2 {
		t.Fatalf("the daemons deleted %d and %d sessions, want 2 in all: %+v", results[0].Deleted, results[1].Deleted, results)
	}
	for i, r := range results {
		for _, s := range r.Sessions {
			if s.SessionID == ids[1] && (i == 0) != (s.Held == nil) {
				t.Errorf("daemon %d: session %s (live on a) listed with held %v", i, s.SessionID, s.Held)
			}
		}
	}
	for _, id := range ids[:2] {
		wantCode(t, ca.Call(ctx, "checkpoint.list", map[string]any{"sessionId": id}, nil), "not_found", id)
	}
	if err := ca.Call(ctx, "checkpoint.list", map[string]any{"sessionId": ids[2]}, nil); err != nil {
		t.Fatalf("the newest session: %v", err)
	}
}
