package job

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/cluster/clustertest"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// hookDefs runs before, once, ahead of the first update of a job
// definition (a fire advancing its slot) and reports that update's error.
type hookDefs struct {
	*postgres.Store
	once   sync.Once
	before func()
	first  chan error
}

func (h *hookDefs) UpdateSetting(ctx context.Context, w store.Writer, ns, key string, fn func(json.RawMessage) (json.RawMessage, error)) error {
	hooked := false
	h.once.Do(func() {
		hooked = true
		h.before()
	})
	err := h.Store.UpdateSetting(ctx, w, ns, key, fn)
	if hooked {
		h.first <- err
	}
	return err
}

// leaseRunner is the fake runner, also recording at each start whether its
// daemon held the job's lease.
type leaseRunner struct {
	fakeRunner
	node  *cluster.Node
	mu    sync.Mutex
	holds []bool
}

func (r *leaseRunner) Run(ctx context.Context, p RunParams, started func(string)) (Outcome, error) {
	r.mu.Lock()
	r.holds = append(r.holds, r.node.Holds(claimKey(p.JobID)))
	r.mu.Unlock()
	return r.fakeRunner.Run(ctx, p, started)
}

// TestScheduledRunStartsOnlyUnderTheJobsLease: a daemon works a fire of a
// once job and is deposed from the job's lease before the run starts,
// (stale) at the database, where another daemon took the lease over, or
// (past its margin) on its own clock. In both it starts nothing; the fire
// goes back to the queue and runs, once, when the lease is its again.
func TestScheduledRunStartsOnlyUnderTheJobsLease(t *testing.T) {
	dsn := pgtest.Server(t)
	for _, tc := range []struct {
		name  string
		lease time.Duration
		// depose runs as the fire advances the slot.
		depose func(t *testing.T, a, b *cluster.Node, dsn, key string)
		// refused is whether the store refuses that advance.
		refused bool
	}{
		{"stale at the database", time.Minute, func(t *testing.T, a, b *cluster.Node, dsn, key string) {
			clustertest.TakeOver(t, dsn, a, b, key)
		}, true},
		{"past the margin on its own clock", time.Second, func(t *testing.T, a, b *cluster.Node, dsn, key string) {
			clustertest.PastMargin(a, key)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.FreshSchema(t, dsn)
			ctx := context.Background()
			st, err := postgres.Open(ctx, schema)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			// Neither node renews (not started): A goes on believing its
			// lease holds until its own clock says otherwise.
			a := cluster.New(cluster.Options{Store: st, DaemonID: "d-a", GRPCAddr: "127.0.0.1:1", Lease: tc.lease})
			b := cluster.New(cluster.Options{Store: st, DaemonID: "d-b", GRPCAddr: "127.0.0.1:2", Lease: time.Minute})
			for _, id := range []string{"d-a", "d-b"} {
				if err := st.RegisterDaemon(ctx, store.Daemon{ID: id, GRPCAddr: "127.0.0.1:1"}); err != nil {
					t.Fatal(err)
				}
			}
			var key string
			defs := &hookDefs{Store: st, first: make(chan error, 1)}
			runner := &leaseRunner{node: a}
			home := t.TempDir()
			s, err := OpenSQLite(ctx, filepath.Join(home, "jobs.db"), Deps{Defs: defs, Runner: runner, Leases: a}, QueueOptions{PollInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(context.Background()) })
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			w := s.Watch(ctx)
			// The hook finds the job's key when the fire's advance comes.
			defs.before = func() {
				list, err := defs.ListSettings(ctx, settingsNamespace)
				if err != nil || len(list) != 1 {
					t.Errorf("jobs %v %v", list, err)
					return
				}
				key = claimKey(list[0].Key)
				tc.depose(t, a, b, schema, key)
			}
			def, err := s.Schedule(ctx, ScheduleParams{Spec: "once " + time.Now().Add(300*time.Millisecond).UTC().Format(time.RFC3339Nano), Task: "hello", Workdir: home})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-defs.first:
				if tc.refused && !errors.Is(err, store.ErrLeaseLost) {
					t.Fatalf("the deposed daemon's advance: %v, want refused with ErrLeaseLost", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the fire was never worked")
			}
			if tc.refused {
				// B gives the job's lease back: A's next attempt runs.
				b.Release(ctx, key)
			}
			var ev Event
			for ev.Kind == "" || ev.Kind == EventStarted {
				ev = next(t, w)
			}
			if ev.Kind != EventFinished || ev.Payload["trigger"] != "schedule" {
				t.Fatalf("run end %+v", ev)
			}
			runner.mu.Lock()
			holds := append([]bool(nil), runner.holds...)
			runner.mu.Unlock()
			if len(holds) != 1 || !holds[0] {
				t.Fatalf("runs started %d, holding the job's lease %v: want one run, started under the lease", len(holds), holds)
			}
			got, err := s.Get(ctx, def.JobID)
			if err != nil || got.Runs != 1 || got.State() != StateDone || !got.Advanced.IsZero() {
				t.Fatalf("job after the run: %+v (%v), want one run, done", got, err)
			}
		})
	}
}

// armedDefs runs depose ahead of the first update of a job definition
// after it is armed, and reports that update's error.
type armedDefs struct {
	*postgres.Store
	depose atomic.Pointer[func()]
	first  chan error
}

func (h *armedDefs) UpdateSetting(ctx context.Context, w store.Writer, ns, key string, fn func(json.RawMessage) (json.RawMessage, error)) error {
	f := h.depose.Swap(nil)
	if f != nil {
		(*f)()
	}
	err := h.Store.UpdateSetting(ctx, w, ns, key, fn)
	if f != nil {
		h.first <- err
	}
	return err
}

// TestRunNowStartsOnlyUnderTheJobsLease: job.runNow takes the job's lease
// as a scheduled fire does. With another daemon holding it, deposed
// (stale) at the database as it re-reads the job under it, or past its
// margin on its own clock before the start, the daemon starts nothing and
// answers overloaded; called again once the lease can be its, the run
// starts, once, under the lease.
func TestRunNowStartsOnlyUnderTheJobsLease(t *testing.T) {
	dsn := pgtest.Server(t)
	for _, tc := range []struct {
		name  string
		lease time.Duration
		// held: B holds the job's lease before the call. Else depose runs
		// as the call re-reads the job under the lease.
		held   bool
		depose func(t *testing.T, a, b *cluster.Node, dsn, key string)
		// refused is whether the store refuses that re-read.
		refused bool
	}{
		{name: "held by another daemon", lease: time.Minute, held: true},
		{name: "stale at the database", lease: time.Minute, depose: func(t *testing.T, a, b *cluster.Node, dsn, key string) {
			clustertest.TakeOver(t, dsn, a, b, key)
		}, refused: true},
		{name: "past the margin on its own clock", lease: time.Second, depose: func(t *testing.T, a, b *cluster.Node, dsn, key string) {
			clustertest.PastMargin(a, key)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.FreshSchema(t, dsn)
			ctx := context.Background()
			st, err := postgres.Open(ctx, schema)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			a := cluster.New(cluster.Options{Store: st, DaemonID: "d-a", GRPCAddr: "127.0.0.1:1", Lease: tc.lease})
			b := cluster.New(cluster.Options{Store: st, DaemonID: "d-b", GRPCAddr: "127.0.0.1:2", Lease: time.Minute})
			for _, id := range []string{"d-a", "d-b"} {
				if err := st.RegisterDaemon(ctx, store.Daemon{ID: id, GRPCAddr: "127.0.0.1:1"}); err != nil {
					t.Fatal(err)
				}
			}
			defs := &armedDefs{Store: st, first: make(chan error, 1)}
			runner := &leaseRunner{node: a}
			home := t.TempDir()
			s, err := OpenSQLite(ctx, filepath.Join(home, "jobs.db"), Deps{Defs: defs, Runner: runner, Leases: a}, QueueOptions{PollInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(context.Background()) })
			// A job whose one slot is far off: only job.runNow runs it.
			def, err := s.Schedule(ctx, ScheduleParams{Spec: "once " + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), Task: "hello", Workdir: home})
			if err != nil {
				t.Fatal(err)
			}
			key := claimKey(def.JobID)
			if tc.held {
				if got, err := b.AcquireResource(ctx, key, nil); err != nil || !got {
					t.Fatalf("B takes the job's lease: %v %v", got, err)
				}
			} else {
				depose := func() { tc.depose(t, a, b, schema, key) }
				defs.depose.Store(&depose)
			}
			_, err = s.RunNow(ctx, def.JobID)
			if errs.CodeOf(err) != errcode.Overloaded {
				t.Fatalf("job.runNow of the deposed daemon: %v, want overloaded", err)
			}
			if !tc.held {
				if err := <-defs.first; tc.refused && !errors.Is(err, store.ErrLeaseLost) {
					t.Fatalf("the deposed daemon's re-read of the job: %v, want refused with ErrLeaseLost", err)
				}
			}
			if n := runner.count(); n != 0 {
				t.Fatalf("the deposed daemon started %d runs", n)
			}
			// B gives the job's lease back (a no-op where it holds none).
			b.Release(ctx, key)
			out, err := s.RunNow(ctx, def.JobID)
			if err != nil || out.Status != StatusOK {
				t.Fatalf("job.runNow with the lease free: %+v %v", out, err)
			}
			runner.mu.Lock()
			holds := append([]bool(nil), runner.holds...)
			runner.mu.Unlock()
			if len(holds) != 1 || !holds[0] {
				t.Fatalf("runs started %d, holding the job's lease %v: want one run, started under the lease", len(holds), holds)
			}
			got, err := s.Get(ctx, def.JobID)
			if err != nil || got.Runs != 1 {
				t.Fatalf("job after the run: %+v (%v), want one run", got, err)
			}
		})
	}
}
