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

	"github.com/trellis-run/trellis/runtime/provider/providertest"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// limitedCluster starts n daemons on one fresh database, each with
// --provider-concurrency capacity, sending OpenAI requests to srv.
func limitedCluster(t *testing.T, srv *providertest.Server, n, capacity int) (string, []*proc) {
	t.Helper()
	t.Setenv("OPENAI_API_KEY", "sk-cluster-limit")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	procs := make([]*proc, n)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i] = startClusterProc(t, dsn, "--provider-concurrency", fmt.Sprint(capacity))
		}()
	}
	wg.Wait()
	for _, p := range procs {
		if p == nil {
			t.FailNow()
		}
	}
	return dsn, procs
}

// TestPostgresProviderLimitsAcrossDaemons: three daemons on one database,
// each with --provider-concurrency 5, share one vendor that serves five
// requests at a time and answers 429 beyond that. Twenty sessions spread
// over the daemons prompt at once: every turn completes, and the vendor
// never serves more than five at once, nor refuses one: the bound is the
// cluster's, not each daemon's (which let fifteen through). The first five
// answers are held until every turn has started and five requests are in,
// and a while longer for a sixth, so the bound is reached.
func TestPostgresProviderLimitsAcrossDaemons(t *testing.T) {
	const daemons, sessions, capacity = 3, 20, 5
	srv := providertest.NewServer(t)
	srv.SetCapacity(capacity)
	hold := make(chan struct{})
	for i := range sessions {
		r := providertest.NewOpenAIStream("gpt-4.1").Text(fmt.Sprintf("Answer %d.", i)).Finish("stop").Usage(10, 2).Reply()
		r.Hold, r.HoldAfter = hold, 1
		srv.Enqueue(r)
	}
	dsn, procs := limitedCluster(t, srv, daemons, capacity)
	clients := make([]*grpcClient, daemons)
	for i, p := range procs {
		clients[i] = dialInfo(t, p.info)
	}
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = createSession(t, clients[i%daemons], map[string]any{"provider": "openai", "model": "gpt-4.1"})
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := clients[i%daemons].Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": fmt.Sprintf("question %d", i)}, nil); err != nil {
				t.Errorf("session.prompt via daemon %d: %v", i%daemons, err)
			}
		}()
	}
	wg.Wait()
	// Every turn has started (and so asked for its model call) before the
	// first answers are let go: on per-daemon limits, each daemon would
	// have sent five by now.
	started := make([][]map[string]any, sessions)
	for i, id := range ids {
		started[i] = collect(t, clients[i%daemons].Events(id), "turn.started", 1)
	}
	srv.WaitRequests(t, capacity, 60*time.Second)
	// A window for the requests per-daemon limits send beside the five
	// (they come within tens of milliseconds of the fifth): the cluster's
	// limit sends none until an answer ends.
	window := time.Now().Add(time.Second)
	for len(srv.Requests()) <= capacity && time.Now().Before(window) {
		time.Sleep(10 * time.Millisecond)
	}
	before := len(srv.Requests())
	close(hold)

	failed, retries := 0, 0
	for i, id := range ids {
		evs := append(started[i], collect(t, clients[i%daemons].Events(id), "turn.done", 1)...)
		for _, ev := range evs {
			if ev["kind"] == "provider.retry" {
				retries++
			}
		}
		if p := payloadOf(evs[len(evs)-1]); p["reason"] != "complete" {
			failed++
			t.Errorf("session %s on daemon %d: turn ended %v: %v", id, i%daemons, p, eventKinds(evs))
		}
	}
	// The sessions ran on every daemon (each on the one it was created on).
	var owners int
	if err := clusterDB(t, dsn).QueryRow(context.Background(), `SELECT count(DISTINCT owner_id) FROM session_leases`).Scan(&owners); err != nil {
		t.Fatal(err)
	}
	if owners != daemons {
		t.Errorf("the sessions ran on %d daemons, want %d", owners, daemons)
	}
	most, refused := srv.Load()
	t.Logf("%d daemons, %d turns, %d failed; %d requests in before the first answers were let go; the server served at most %d at once, refused %d; %d provider.retry events",
		daemons, sessions, failed, before, most, refused, retries)
	if most > capacity || refused != 0 || retries != 0 {
		t.Errorf("the server served up to %d at once and refused %d (%d retries), want at most %d and none", most, refused, retries, capacity)
	}
	if n := len(srv.Requests()); n != sessions {
		t.Errorf("the server got %d requests, want %d", n, sessions)
	}
}

// TestPostgresProviderSlotsOfAKilledDaemon: daemon A holds all five slots
// (its five calls stream, held by the vendor) when it is killed -9; daemon
// B's call, waiting meanwhile, gets a slot once A's leases end (--lease)
// and its turn completes. The vendor refused nothing: B's request was not
// sent while A's five were served.
func TestPostgresProviderSlotsOfAKilledDaemon(t *testing.T) {
	const capacity = 5
	srv := providertest.NewServer(t)
	srv.SetCapacity(capacity)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	for i := range capacity {
		r := providertest.NewOpenAIStream("gpt-4.1").Text(fmt.Sprintf("Answer %d.", i)).Finish("stop").Usage(10, 2).Reply()
		r.Hold, r.HoldAfter = hold, 1
		srv.Enqueue(r)
	}
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").Text("B's answer.").Finish("stop").Usage(10, 2).Reply())
	dsn, procs := limitedCluster(t, srv, 2, capacity)
	a, b := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)
	ctx := context.Background()
	for i := range capacity {
		id := createSession(t, a, map[string]any{"provider": "openai", "model": "gpt-4.1"})
		if err := a.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": fmt.Sprintf("question %d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	srv.WaitRequests(t, capacity, 60*time.Second)

	raw, err := os.ReadFile(filepath.Join(procs[0].home, "daemon-id"))
	if err != nil {
		t.Fatal(err)
	}
	idA := strings.TrimSpace(string(raw))
	db := clusterDB(t, dsn)
	var held int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM provider_slots WHERE provider = 'openai' AND owner = $1 AND expires_at > now()`, idA).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != capacity {
		t.Fatalf("daemon A holds %d slots in the store while its %d calls stream, want %d", held, capacity, capacity)
	}

	idB := createSession(t, b, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if err := b.Call(ctx, "session.prompt", map[string]any{"sessionId": idB, "text": "question B"}, nil); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	procs[0].kill()
	evs := collect(t, b.Events(idB), "turn.done", 1)
	took := time.Since(killed)
	if p := payloadOf(evs[len(evs)-1]); p["reason"] != "complete" {
		t.Fatalf("B's turn ended %v: %v", p, eventKinds(evs))
	}
	for _, ev := range evs {
		if ev["kind"] == "provider.retry" {
			t.Errorf("B's turn was retried: %v", payloadOf(ev))
		}
	}
	most, refused := srv.Load()
	t.Logf("B's turn completed %v after A was killed (lease %v); the server served at most %d at once, refused %d",
		took.Round(time.Millisecond), clusterLease, most, refused)
	if most > capacity || refused != 0 {
		t.Errorf("the server served up to %d at once and refused %d, want at most %d and none", most, refused, capacity)
	}
	if n := len(srv.Requests()); n != capacity+1 {
		t.Errorf("the server got %d requests, want %d", n, capacity+1)
	}
}
