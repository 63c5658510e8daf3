package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// clusterDB opens the shared database for checks.
func clusterDB(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type storedEvent struct {
	seq    int64
	kind   string
	turnID string
	reason string
	synth  bool
}

func storedEvents(t *testing.T, db *pgx.Conn, id string) []storedEvent {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT seq, kind, COALESCE(payload->>'turnId', ''), COALESCE(payload->>'reason', ''),
		COALESCE((payload->>'synthetic')::bool, false) FROM events WHERE session_id = $1 ORDER BY seq`, id)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedEvent, error) {
		var e storedEvent
		err := r.Scan(&e.seq, &e.kind, &e.turnID, &e.reason, &e.synth)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestPostgresScaleOutFailover: kill -9 of the session's owner mid-turn, 20
// times across 3 daemons. Each time another daemon takes the session over
// when the lease expires, closes the interrupted turn with a synthetic
// turn.done{interrupted}, and answers the next prompt; the log ends with no
// seq lost or repeated and every turn closed exactly once.
func TestPostgresScaleOutFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("20 kill -9 rounds")
	}
	dsn, procs := startCluster(t, 3)
	db := clusterDB(t, dsn)
	ctx := context.Background()
	clients := make([]*grpcClient, len(procs))
	daemonIDs := make([]string, len(procs))
	for i, p := range procs {
		clients[i] = dialInfo(t, p.info)
		b, err := os.ReadFile(filepath.Join(p.home, "daemon-id"))
		if err != nil {
			t.Fatal(err)
		}
		daemonIDs[i] = strings.TrimSpace(string(b))
	}
	id := createSession(t, clients[0], nil)
	owner := func() int {
		var o string
		if err := db.QueryRow(ctx, `SELECT owner_id FROM session_leases WHERE session_id = $1`, id).Scan(&o); err != nil {
			t.Fatal(err)
		}
		for i, d := range daemonIDs {
			if d == o {
				return i
			}
		}
		t.Fatalf("the lease names daemon %s, not one of %v", o, daemonIDs)
		return -1
	}
	// prompt sends text via daemon via until it is accepted (a call that
	// reaches a dead owner is refused with overloaded until the lease
	// expires) and returns the turn id and how long that took.
	prompt := func(via int, text string) (string, time.Duration) {
		start := time.Now()
		deadline := start.Add(60 * time.Second)
		for {
			var res struct {
				TurnID string `json:"turnId"`
			}
			err := clients[via].Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": text}, &res)
			if err == nil {
				return res.TurnID, time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("prompt via daemon %d: still refused after 60 s: %v", via, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor := func(what string, ok func([]storedEvent) bool) []storedEvent {
		deadline := time.Now().Add(60 * time.Second)
		for {
			evs := storedEvents(t, db, id)
			if ok(evs) {
				return evs
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 60 s; last events %v", what, evs[max(0, len(evs)-5):])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	doneOf := func(turn string) func([]storedEvent) bool {
		return func(evs []storedEvent) bool {
			for _, e := range evs {
				if e.kind == "turn.done" && e.turnID == turn {
					return true
				}
			}
			return false
		}
	}

	const rounds = 20
	killed := map[string]bool{}
	var worst time.Duration
	via := 0
	for round := 0; round < rounds; round++ {
		turn, _ := prompt(via, "slow")
		// Mid-turn: a few chunks are stored.
		waitFor("chunks of turn "+turn, func(evs []storedEvent) bool {
			started, chunks := false, 0
			for _, e := range evs {
				if e.kind == "turn.started" && e.turnID == turn {
					started = true
				}
				if started && e.kind == "message.delta" {
					chunks++
				}
			}
			return chunks >= 3
		})
		o := owner()
		if round == 0 {
			// Every daemon reports the turn running, not only its owner.
			for i, c := range clients {
				var got struct {
					Sessions []map[string]any `json:"sessions"`
				}
				if err := c.Call(ctx, "session.list", map[string]any{}, &got); err != nil {
					t.Fatal(err)
				}
				if len(got.Sessions) != 1 || got.Sessions[0]["status"] != "running" {
					t.Fatalf("session.list on daemon %d (owner %d) during a turn: %v", i, o, got.Sessions)
				}
			}
		}
		procs[o].kill()
		killed[turn] = true
		// The next prompt through another daemon: it takes the session
		// over once the lease expires, closing the killed turn first.
		via = (o + 1 + round%2) % len(procs)
		if via == o {
			via = (o + 1) % len(procs)
		}
		next, took := prompt(via, "hello")
		worst = max(worst, took)
		waitFor("turn.done of "+next, doneOf(next))
		if !doneOf(turn)(storedEvents(t, db, id)) {
			t.Fatalf("round %d: the killed turn %s has no turn.done", round, turn)
		}
		// Bring the killed daemon back (same home, same id) for the next round.
		procs[o] = runClusterProc(t, procs[o].home, dsn)
		clients[o] = dialInfo(t, procs[o].info)
	}

	evs := storedEvents(t, db, id)
	dones := map[string]int{}
	started := map[string]bool{}
	for i, e := range evs {
		if e.seq != int64(i+1) {
			t.Fatalf("seq %d at position %d: an event was lost or repeated", e.seq, i)
		}
		switch e.kind {
		case "turn.started":
			started[e.turnID] = true
		case "turn.done":
			dones[e.turnID]++
			if killed[e.turnID] && (e.reason != "interrupted" || !e.synth) {
				t.Fatalf("killed turn %s closed with %+v, want a synthetic interrupted turn.done", e.turnID, e)
			}
			if !killed[e.turnID] && e.reason != "complete" {
				t.Fatalf("turn %s: %+v", e.turnID, e)
			}
		}
	}
	for turn := range started {
		if dones[turn] != 1 {
			t.Fatalf("turn %s has %d turn.done, want 1", turn, dones[turn])
		}
	}
	if len(started) != 2*rounds || len(killed) != rounds {
		t.Fatalf("%d turns started, %d killed; want %d and %d", len(started), len(killed), 2*rounds, rounds)
	}
	t.Logf("%d kill -9 rounds: %d events, seq 1..%d with no gap or repeat, %d turns each closed once; slowest next prompt accepted %v after the kill (lease %v)",
		rounds, len(evs), len(evs), len(started), worst.Round(time.Millisecond), clusterLease)
}

// TestPostgresScaleOutJobs: an @every 1s job for 30 s with 3 daemons on one
// database: each slot runs exactly once, checked on River's rows (one
// completed fire per slot, whatever daemon worked it) and on the sessions
// the runs created (one per slot).
func TestPostgresScaleOutJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s of schedule")
	}
	dsn, procs := startCluster(t, 3)
	db := clusterDB(t, dsn)
	ctx := context.Background()
	a, b := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)
	var sched struct {
		JobID string `json:"jobId"`
	}
	if err := a.Call(ctx, "job.schedule", map[string]any{"spec": "@every 1s", "task": "hello", "workdir": t.TempDir()}, &sched); err != nil {
		t.Fatal(err)
	}
	// 30 slots fired, at the schedule's own pace.
	for {
		var fired int
		if err := db.QueryRow(ctx, `SELECT count(DISTINCT args->>'slot') FROM river_job WHERE args->>'jobId' = $1`, sched.JobID).Scan(&fired); err != nil {
			t.Fatal(err)
		}
		if fired >= 30 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := b.Call(ctx, "job.cancel", map[string]any{"jobId": sched.JobID}, nil); err != nil {
		t.Fatal(err)
	}
	// Let the runs in flight finish.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'jobId' = $1 AND state IN ('running', 'retryable')`, sched.JobID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d fires still running 60 s after the cancel", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := db.Query(ctx, `SELECT args->>'slot', count(*), count(*) FILTER (WHERE state = 'completed') FROM river_job
		WHERE args->>'jobId' = $1 GROUP BY 1`, sched.JobID)
	if err != nil {
		t.Fatal(err)
	}
	type slotRow struct {
		slot            string
		rows, completed int
	}
	slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (slotRow, error) {
		var s slotRow
		err := r.Scan(&s.slot, &s.rows, &s.completed)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	completed := map[string]bool{}
	for _, s := range slots {
		if s.rows != 1 {
			t.Fatalf("slot %s has %d River rows, want 1", s.slot, s.rows)
		}
		if s.completed == 1 {
			completed[s.slot] = true
		}
	}
	var sessions int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE job_id = $1`, sched.JobID).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	var workers int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT attempted_by[1]) FROM river_job WHERE args->>'jobId' = $1 AND state = 'completed'`, sched.JobID).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if len(completed) < 20 {
		t.Fatalf("only %d slots ran in 30 s of an @every 1s job", len(completed))
	}
	if sessions != len(completed) {
		t.Fatalf("%d sessions for %d completed slots: a slot ran twice or a run made no session", sessions, len(completed))
	}
	t.Logf("@every 1s for 30 s on 3 daemons: %d slots, each one River row; %d completed, %d sessions; worked by %d daemon(s)", len(slots), len(completed), sessions, workers)
}

// TestPostgresScaleOutSharedState: 2 daemons change shared state at once,
// 1,000 changes in all: every allowlist pattern added through either
// daemon is listed by both, none lost.
func TestPostgresScaleOutSharedState(t *testing.T) {
	_, procs := startCluster(t, 2)
	ctx := context.Background()
	cs := []*grpcClient{dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)}
	const each = 500
	var wg sync.WaitGroup
	for i, c := range cs {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := w; k < each; k += 4 {
					p := fmt.Sprintf("shell(echo d%d-%d*)", i, k)
					if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": p, "scope": "always"}, nil); err != nil {
						t.Errorf("add %s via daemon %d: %v", p, i, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for i, c := range cs {
		var res struct {
			Patterns []map[string]any `json:"patterns"`
		}
		if err := c.Call(ctx, "permission.allowlist.list", map[string]any{"scope": "always"}, &res); err != nil {
			t.Fatal(err)
		}
		seen := map[any]bool{}
		for _, p := range res.Patterns {
			seen[p["pattern"]] = true
		}
		if len(seen) != 2*each {
			t.Fatalf("daemon %d lists %d distinct patterns, want %d", i, len(seen), 2*each)
		}
	}
	t.Logf("%d allowlist additions through 2 daemons at once: %d listed by each", 2*each, 2*each)
}
