package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
)

// TestPostgresScaleOutConcurrentUpdates: 2 daemons on one database change
// the same job and the same allowlist at the same time, over gRPC, and no
// change is lost.
//
//   - Job: each daemon runs the same job (job.runNow) 500 times from 4
//     goroutines. Every run changes the job's stored definition twice (its
//     start: runs+1, the run's session added to running; its end: the
//     session removed, lastStatus), so 2,000 changes of one definition
//     race across the daemons. In the end the definition counts 1,000 runs
//     and lists none running, and 1,000 sessions belong to the job.
//   - Allowlist: each daemon adds 500 patterns from 4 goroutines, 250 of
//     its own and the same 250 shared ones as the other daemon, each shared
//     pattern added through both daemons at about the same moment (1,000
//     additions). Every pattern is listed by both daemons exactly once, and
//     both additions of a shared pattern answer the same pattern id.
func TestPostgresScaleOutConcurrentUpdates(t *testing.T) {
	dsn, procs := startCluster(t, 2)
	db := clusterDB(t, dsn)
	ctx := context.Background()
	cs := []*grpcClient{dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)}

	var job struct {
		JobID string `json:"jobId"`
	}
	if err := cs[0].Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "hello", "workdir": t.TempDir()}, &job); err != nil {
		t.Fatalf("job.schedule: %v", err)
	}

	const (
		runsEach    = 500 // job.runNow per daemon
		ownEach     = 250 // allowlist patterns only one daemon adds
		shared      = 250 // allowlist patterns both daemons add
		workersEach = 4   // goroutines per daemon and kind of change
	)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[string]int{}
		sharedID = [2][shared]string{}
	)
	for i, c := range cs {
		for w := range workersEach {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for k := w; k < runsEach; k += workersEach {
					var res struct {
						Status string `json:"status"`
					}
					if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": job.JobID}, &res); err != nil {
						t.Errorf("job.runNow via daemon %d: %v", i, err)
						return
					}
					mu.Lock()
					statuses[res.Status]++
					mu.Unlock()
				}
			}()
			go func() {
				defer wg.Done()
				// Both daemons go through the shared patterns in the same
				// order, so that the two additions of one pattern race;
				// their own patterns come in between.
				for k := w; k < ownEach+shared; k += workersEach {
					var p string
					var slot int
					if k%2 == 0 {
						slot = k / 2
						p = fmt.Sprintf("shell(echo shared-%d*)", slot)
					} else {
						slot = -1
						p = fmt.Sprintf("shell(echo d%d-%d*)", i, k)
					}
					var res struct {
						PatternID string `json:"patternId"`
					}
					if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": p, "scope": "always"}, &res); err != nil {
						t.Errorf("add %s via daemon %d: %v", p, i, err)
						return
					}
					if slot >= 0 {
						mu.Lock()
						sharedID[i][slot] = res.PatternID
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The job: 1,000 runs recorded, none left running, 1,000 sessions.
	var raw []byte
	if err := db.QueryRow(ctx, `SELECT value::text FROM settings WHERE namespace = 'jobs' AND key = $1`, job.JobID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var def struct {
		Runs       int      `json:"runs"`
		Running    []string `json:"running"`
		LastStatus string   `json:"lastStatus"`
	}
	if err := json.Unmarshal(raw, &def); err != nil {
		t.Fatal(err)
	}
	const runs = 2 * runsEach
	if def.Runs != runs || len(def.Running) != 0 {
		t.Fatalf("after %d job.runNow through 2 daemons the job records %d runs, %d still running (e.g. %v): changes were lost", runs, def.Runs, len(def.Running), def.Running[:min(3, len(def.Running))])
	}
	if statuses["ok"] != runs {
		t.Fatalf("job.runNow statuses %v, want %d ok", statuses, runs)
	}
	var sessions int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE job_id = $1`, job.JobID).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != runs {
		t.Fatalf("%d sessions of the job after %d runs", sessions, runs)
	}
	for i, c := range cs {
		var list struct {
			Jobs []map[string]any `json:"jobs"`
		}
		if err := c.Call(ctx, "job.list", map[string]any{}, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Jobs) != 1 || list.Jobs[0]["state"] != "scheduled" || list.Jobs[0]["lastStatus"] != "ok" {
			t.Fatalf("daemon %d: job.list %v, want the one job scheduled, last run ok", i, list.Jobs)
		}
	}

	// The allowlist: every pattern once, on both daemons.
	for k := range shared {
		if sharedID[0][k] == "" || sharedID[0][k] != sharedID[1][k] {
			t.Errorf("shared pattern %d added through both daemons: ids %q and %q, want one id", k, sharedID[0][k], sharedID[1][k])
		}
	}
	want := 2*ownEach + shared
	for i, c := range cs {
		var res struct {
			Patterns []map[string]any `json:"patterns"`
		}
		if err := c.Call(ctx, "permission.allowlist.list", map[string]any{"scope": "always"}, &res); err != nil {
			t.Fatal(err)
		}
		seen := map[any]int{}
		for _, p := range res.Patterns {
			seen[p["pattern"]]++
		}
		for p, n := range seen {
			if n != 1 {
				t.Errorf("daemon %d lists %s %d times", i, p, n)
			}
		}
		if len(seen) != want {
			t.Fatalf("daemon %d lists %d distinct patterns, want %d", i, len(seen), want)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("2 daemons at once: %d job.runNow (%d changes of one job definition), %d allowlist additions (%d shared): none lost, no duplicate", runs, 2*runs, 2*(ownEach+shared), shared)
}
