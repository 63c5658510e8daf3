package job

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// fakeRunner runs nothing: each run gets a fresh session id and ends as
// outcome says (ok by default).
type fakeRunner struct {
	mu      sync.Mutex
	runs    []RunParams
	outcome func(ctx context.Context) Outcome
}

func (f *fakeRunner) Run(ctx context.Context, p RunParams, started func(string)) (Outcome, error) {
	f.mu.Lock()
	f.runs = append(f.runs, p)
	fn := f.outcome
	f.mu.Unlock()
	id := ids.New("s")
	started(id)
	out := Outcome{Status: StatusOK, Reason: events.TurnDoneReasonComplete}
	if fn != nil {
		out = fn(ctx)
	}
	out.SessionID = id
	return out, nil
}

func (f *fakeRunner) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

// env is a job service over a temporary home: the definitions in a SQLite
// store, River in jobs.db beside it.
type env struct {
	home   string
	st     store.Store
	runner *fakeRunner
	// ownerMayRun is the services' Deps.OwnerMayRun.
	ownerMayRun func(ctx context.Context, owner, jobID string) error
	// skew is how far the services' clock (theirs and River's) is ahead of
	// the real one: a test passes downtime by adding to it, not sleeping.
	skew atomic.Int64
}

// now is the services' clock.
func (e *env) now() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) }

// pass moves the services' clock forward by d at once.
func (e *env) pass(d time.Duration) { e.skew.Add(int64(d)) }

func newEnv(t *testing.T) *env {
	t.Helper()
	home := t.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "trellis.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{home: home, st: st, runner: &fakeRunner{}}
}

// open opens a service on the env's files; start starts it too.
func (e *env) open(t *testing.T, start bool) *Service {
	t.Helper()
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(e.home, "jobs.db"), Deps{Defs: e.st, Runner: e.runner, DefaultWorkdir: filepath.Join(e.home, "workspace"), Now: e.now, OwnerMayRun: e.ownerMayRun}, QueueOptions{PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	if start {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (e *env) schedule(t *testing.T, s *Service, spec string) Def {
	t.Helper()
	def, err := s.Schedule(context.Background(), ScheduleParams{Spec: spec, Task: "hello", Workdir: e.home})
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// next reads the next event of w, failing after 10 s.
func next(t *testing.T, w *Watch) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no job event within 10 s")
	}
	return Event{}
}

// ends reads events until n runs have ended and returns those end events.
func ends(t *testing.T, w *Watch, n int) []Event {
	t.Helper()
	var out []Event
	for len(out) < n {
		if ev := next(t, w); ev.Kind != EventStarted {
			out = append(out, ev)
		}
	}
	return out
}

func slotOf(t *testing.T, ev Event) time.Time {
	t.Helper()
	s, _ := ev.Payload["slot"].(string)
	v, err := time.Parse(slotLayout, s)
	if err != nil {
		t.Fatalf("event %v: slot: %v", ev, err)
	}
	return v
}

func TestEveryFiresEachSlotOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, true)
	w := s.Watch(context.Background())
	def := e.schedule(t, s, "@every 1s")
	if want := def.CreatedAt.Add(time.Second); !def.NextRunAt.Equal(want) {
		t.Fatalf("first slot %v, want %v", def.NextRunAt, want)
	}
	start := next(t, w)
	if start.Kind != EventStarted || start.JobID != def.JobID || start.Payload["trigger"] != "schedule" {
		t.Fatalf("first event %+v", start)
	}
	got := ends(t, w, 3)
	var lag time.Duration
	for i, ev := range got {
		if ev.Kind != EventFinished || ev.Payload["status"] != StatusOK {
			t.Fatalf("end %d: %+v", i, ev)
		}
		startedAt, _ := time.Parse(slotLayout, ev.Payload["startedAt"].(string))
		lag = max(lag, startedAt.Sub(slotOf(t, ev)))
		if want := def.CreatedAt.Add(time.Duration(i+1) * time.Second); !slotOf(t, ev).Equal(want) {
			t.Fatalf("run %d for slot %v, want %v", i, slotOf(t, ev), want)
		}
	}
	list, err := s.List(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	j := list[0]
	if j.LastStatus != StatusOK || j.LastRunAt.IsZero() || j.LastSessionID == "" || !j.Enabled() || j.Kind != KindInterval {
		t.Fatalf("job after runs: %+v", j)
	}
	if !j.NextRunAt.After(slotOf(t, got[2])) {
		t.Fatalf("nextRunAt %v not after the last slot run %v", j.NextRunAt, slotOf(t, got[2]))
	}
	if c := s.Count(context.Background()); c != 1 {
		t.Fatalf("count %d, want 1", c)
	}
	t.Logf("3 slots, 3 runs, one per slot; a run started at most %v after its slot", lag)
}

// TestCatchUpOnceAfterDowntime: a schedule that missed several slots while
// no daemon ran fires once at start, then on its next future slot.
func TestCatchUpOnceAfterDowntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.open(t, true)
	wa := a.Watch(context.Background())
	def := e.schedule(t, a, "@every 1s")
	ends(t, wa, 1)
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := e.runner.count()
	stopped := e.now()
	e.pass(3500 * time.Millisecond) // the downtime: three or four slots pass
	b := e.open(t, false)
	wb := b.Watch(context.Background())
	restart := e.now()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := ends(t, wb, 2)
	var catchUp []time.Time
	for _, ev := range got {
		if slot := slotOf(t, ev); slot.Before(restart) {
			catchUp = append(catchUp, slot)
			if !slot.After(stopped.Add(-time.Second)) {
				t.Fatalf("catch-up for slot %v, from before the stop at %v", slot, stopped)
			}
		}
	}
	if len(catchUp) != 1 {
		t.Fatalf("%d runs for slots missed during the downtime (%v), want exactly 1", len(catchUp), catchUp)
	}
	// The other run is of the first slot after the restart. It may end
	// before the catch-up: both are due at once when the restart falls
	// just before a slot.
	for _, ev := range got {
		if s := slotOf(t, ev); !s.Equal(catchUp[0]) && !s.After(restart) {
			t.Fatalf("besides the catch-up: slot %v, want a future slot (restart %v)", s, restart)
		}
	}
	t.Logf("job %s: %d runs before the stop, %d slots passed in %.1f s of downtime, 1 catch-up run for slot %s",
		def.JobID, before, int(restart.Sub(stopped)/time.Second), restart.Sub(stopped).Seconds(), catchUp[0].Format(slotLayout))
}

// TestCatchUpWhenMissedFireWasWorked: when the fire of the recorded next
// slot was already worked (the daemon died before recording the slot after
// it), the catch-up runs the latest missed slot instead: still one run.
func TestCatchUpWhenMissedFireWasWorked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.open(t, false)
	def := e.schedule(t, a, "@every 1s")
	// A finalized row for the first slot, as if it had been worked.
	if err := a.q.cancel(context.Background(), def.NextFire); err != nil {
		t.Fatal(err)
	}
	a.Stop(context.Background())
	e.pass(2500 * time.Millisecond) // the downtime
	b := e.open(t, false)
	w := b.Watch(context.Background())
	restart := e.now()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := ends(t, w, 2)
	// By slot: the two runs may end in either order when both are due at once.
	first, second := slotOf(t, got[0]), slotOf(t, got[1])
	if second.Before(first) {
		first, second = second, first
	}
	if first.Equal(def.NextRunAt) || !first.Before(restart) || !second.After(restart) {
		t.Fatalf("runs for slots %v, %v (restart %v, cancelled slot %v): want one catch-up for a later missed slot, then a future one",
			first, second, restart, def.NextRunAt)
	}
}

func TestCancelStopsFiresAndInterruptsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runner.outcome = func(ctx context.Context) Outcome {
		<-ctx.Done() // runs until interrupted
		return Outcome{Status: StatusError, Reason: events.TurnDoneReasonInterrupted, Error: "interrupted"}
	}
	s := e.open(t, true)
	w := s.Watch(context.Background())
	def := e.schedule(t, s, "@every 1s")
	if ev := next(t, w); ev.Kind != EventStarted {
		t.Fatalf("event %+v, want started", ev)
	}
	if err := s.Cancel(context.Background(), def.JobID); err != nil {
		t.Fatal(err)
	}
	// Cancel returns once the run has recorded its end.
	list, _ := s.List(context.Background())
	if j := list[0]; j.State() != StateCancelled || j.Enabled() || j.LastStatus != StatusError || !j.NextRunAt.IsZero() || len(j.Running) != 0 {
		t.Fatalf("after cancel: %+v (state %s)", j, j.State())
	}
	if ev := next(t, w); ev.Kind != EventFailed || ev.Payload["reason"] != events.TurnDoneReasonInterrupted {
		t.Fatalf("end event %+v, want failed/interrupted", ev)
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("event after cancel: %+v", ev)
	case <-time.After(1200 * time.Millisecond):
	}
	if n := e.runner.count(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if err := s.Cancel(context.Background(), def.JobID); err != nil {
		t.Fatalf("cancel twice: %v", err)
	}
}

func TestRunNow(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, true)
	w := s.Watch(context.Background())
	def := e.schedule(t, s, "@daily")
	out, err := s.RunNow(context.Background(), def.JobID)
	if err != nil || out.Status != StatusOK || out.SessionID == "" {
		t.Fatalf("runNow: %+v %v", out, err)
	}
	if ev := next(t, w); ev.Kind != EventStarted || ev.Payload["sessionId"] != out.SessionID || ev.Payload["trigger"] != "manual" || ev.Payload["slot"] != nil {
		t.Fatalf("started: %+v", ev)
	}
	if ev := next(t, w); ev.Kind != EventFinished || ev.Payload["status"] != StatusOK {
		t.Fatalf("finished: %+v", ev)
	}
	list, _ := s.List(context.Background())
	if j := list[0]; j.LastSessionID != out.SessionID || j.LastStatus != StatusOK || j.State() != StateScheduled || j.Runs != 1 {
		t.Fatalf("after runNow: %+v", j)
	}
	for _, id := range []string{"j-nope", ""} {
		_, err = s.RunNow(context.Background(), id)
		if want := map[string]string{"j-nope": errcode.NotFound, "": errcode.InvalidParams}[id]; errs.CodeOf(err) != want {
			t.Fatalf("runNow(%q): %v, want %s", id, err, want)
		}
	}
	if err := s.Cancel(context.Background(), "j-nope"); !errors.Is(err, ErrNotFound) || errs.CodeOf(err) != errcode.NotFound {
		t.Fatalf("cancel unknown: %v", err)
	}
}

// TestOwnerKeptAndGivenToRuns: a job's owner is saved with it (across a
// restart), owns the sessions of its runs and names its events.
func TestOwnerKeptAndGivenToRuns(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, true)
	def, err := s.Schedule(context.Background(), ScheduleParams{Spec: "@daily", Task: "hello", Workdir: e.home, Owner: "p-ann", OwnerName: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = e.open(t, true)
	got, err := s.Get(context.Background(), def.JobID)
	if err != nil || got.Owner != "p-ann" || got.OwnerName != "ann" {
		t.Fatalf("job after a restart: %+v %v, want owned by p-ann (ann)", got, err)
	}
	w := s.Watch(context.Background())
	if _, err := s.RunNow(context.Background(), def.JobID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ev := next(t, w); ev.Owner != "p-ann" {
			t.Fatalf("event %+v, want owner p-ann", ev)
		}
	}
	e.runner.mu.Lock()
	defer e.runner.mu.Unlock()
	if len(e.runner.runs) != 1 || e.runner.runs[0].Owner != "p-ann" {
		t.Fatalf("runs %+v, want one owned by p-ann", e.runner.runs)
	}
}

// TestOwnerMayRun: a job whose owner may no longer run it does not run;
// the run fails with the check's error, recorded and published.
func TestOwnerMayRun(t *testing.T) {
	e := newEnv(t)
	refused := errs.New(errcode.Forbidden, "ann is a viewer now")
	e.ownerMayRun = func(_ context.Context, owner, _ string) error {
		if owner == "p-ann" {
			return refused
		}
		return nil
	}
	s := e.open(t, true)
	w := s.Watch(context.Background())
	ann, err := s.Schedule(context.Background(), ScheduleParams{Spec: "@daily", Task: "hello", Workdir: e.home, Owner: "p-ann"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunNow(context.Background(), ann.JobID); errs.CodeOf(err) != errcode.Forbidden {
		t.Fatalf("runNow of the refused owner's job: %v, want forbidden", err)
	}
	if ev := next(t, w); ev.Kind != EventFailed || ev.Payload["error"] != refused.Error() {
		t.Fatalf("event %+v, want failed with the refusal", ev)
	}
	if e.runner.count() != 0 {
		t.Fatal("the refused owner's job ran")
	}
	if got, _ := s.Get(context.Background(), ann.JobID); got.LastStatus != StatusError {
		t.Fatalf("job after the refused run: %+v, want last status error", got)
	}
	bob, err := s.Schedule(context.Background(), ScheduleParams{Spec: "@daily", Task: "hello", Workdir: e.home, Owner: "p-bob"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.RunNow(context.Background(), bob.JobID); err != nil || out.Status != StatusOK {
		t.Fatalf("runNow of an allowed owner's job: %+v %v", out, err)
	}
}

func TestRunStatuses(t *testing.T) {
	tests := []struct {
		name      string
		outcome   Outcome
		wantEvent string
	}{
		{"ok", Outcome{Status: StatusOK, Reason: events.TurnDoneReasonComplete}, EventFinished},
		{"denied by timeout", Outcome{Status: StatusDeniedByTimeout, Reason: events.TurnDoneReasonComplete, Error: "nobody answered"}, EventDenied},
		{"error", Outcome{Status: StatusError, Reason: events.TurnDoneReasonError, Error: "provider failed"}, EventFailed},
	}
	e := newEnv(t)
	s := e.open(t, true)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.runner.mu.Lock()
			e.runner.outcome = func(context.Context) Outcome { return tt.outcome }
			e.runner.mu.Unlock()
			w := s.Watch(context.Background())
			def := e.schedule(t, s, "@daily")
			out, err := s.RunNow(context.Background(), def.JobID)
			if err != nil || out.Status != tt.outcome.Status {
				t.Fatalf("runNow: %+v %v", out, err)
			}
			end := ends(t, w, 1)[0]
			if end.Kind != tt.wantEvent || end.Payload["status"] != tt.outcome.Status || end.Payload["reason"] != tt.outcome.Reason {
				t.Fatalf("end event %+v, want %s", end, tt.wantEvent)
			}
			list, _ := s.List(context.Background())
			if list[0].JobID != def.JobID || list[0].LastStatus != tt.outcome.Status {
				t.Fatalf("job %+v", list[0])
			}
		})
	}
}

func TestScheduleInvalid(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, false)
	tests := []struct {
		name string
		p    ScheduleParams
		want string // in the message
	}{
		{"bad spec", ScheduleParams{Spec: "every other day", Task: "x", Workdir: e.home}, "<days> at <time>"},
		{"bad cron", ScheduleParams{Spec: "1 2 3", Task: "x", Workdir: e.home}, "5 fields"},
		{"short interval", ScheduleParams{Spec: "@every 10ms", Task: "x", Workdir: e.home}, "minimum 1s"},
		{"past once", ScheduleParams{Spec: "once 2001-01-01T00:00:00Z", Task: "x", Workdir: e.home}, "has passed"},
		{"empty task", ScheduleParams{Spec: "@daily", Task: "  ", Workdir: e.home}, "task is empty"},
		{"bad mode", ScheduleParams{Spec: "@daily", Task: "x", Mode: "yolo", Workdir: e.home}, "mode \"yolo\""},
		{"missing workdir", ScheduleParams{Spec: "@daily", Task: "x", Workdir: filepath.Join(e.home, "nope")}, "does not exist"},
		{"huge workdir", ScheduleParams{Spec: "@daily", Task: "x", Workdir: "/" + strings.Repeat("a", 10<<20)}, "a path is at most 4095 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Schedule(context.Background(), tt.p)
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errcode.InvalidParams || !strings.Contains(e.Msg, tt.want) {
				t.Fatalf("err %v, want invalid_params containing %q", err, tt.want)
			}
		})
	}
	if _, err := s.Schedule(context.Background(), ScheduleParams{Spec: "@bogus", Task: "x"}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("bad spec error %v does not wrap ErrInvalidSpec", err)
	}
	def, err := s.Schedule(context.Background(), ScheduleParams{Spec: "@hourly", Task: "x"})
	if err != nil || def.Mode != DefaultMode || def.Kind != KindCron {
		t.Fatalf("defaults: %+v %v", def, err)
	}
	// No workdir: the configured default (created), never the cwd.
	if want, _ := filepath.EvalSymlinks(filepath.Join(e.home, "workspace")); def.Workdir != want {
		t.Fatalf("default workdir %q, want %q", def.Workdir, want)
	}
}

func TestOnceRunsOnceThenDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, true)
	w := s.Watch(context.Background())
	at := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	def := e.schedule(t, s, "once "+at)
	if def.Kind != KindOnce {
		t.Fatalf("kind %s", def.Kind)
	}
	ends(t, w, 1)
	list, _ := s.List(context.Background())
	if j := list[0]; j.State() != StateDone || j.Enabled() || !j.NextRunAt.IsZero() {
		t.Fatalf("after the run: %+v (state %s)", j, j.State())
	}
	if c := s.Count(context.Background()); c != 0 {
		t.Fatalf("count %d, want 0", c)
	}
}

// TestStartRecordsRunsCutByACrash: runs that a dead daemon left open are
// recorded as errors at the next start.
func TestStartRecordsRunsCutByACrash(t *testing.T) {
	e := newEnv(t)
	a := e.open(t, false)
	def := e.schedule(t, a, "@daily")
	a.Stop(context.Background())
	def.Running, def.LastSessionID, def.LastStatus = []string{"s-dead"}, "s-dead", ""
	if err := (defs{st: e.st}).put(context.Background(), store.Unfenced(), def); err != nil {
		t.Fatal(err)
	}
	b := e.open(t, true)
	list, _ := b.List(context.Background())
	if j := list[0]; len(j.Running) != 0 || j.LastStatus != StatusError || j.State() != StateScheduled {
		t.Fatalf("after restart: %+v", j)
	}
}

// A fire already fetched when its job is cancelled runs nothing, and the
// queue records it as cancelled, not completed: a completed fire always
// means a run (TestPostgresScaleOutJobs counts on it).
func TestFireOfACancelledJobIsCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, false)
	def := e.schedule(t, s, "@every 1h")
	if err := s.Cancel(context.Background(), def.JobID); err != nil {
		t.Fatal(err)
	}
	slot := e.now().Truncate(time.Second)
	if err := s.fire(context.Background(), def.JobID, slot); !errors.Is(err, errFireSkipped) {
		t.Fatalf("fire of a cancelled job = %v, want errFireSkipped", err)
	}
	w := &fireWorker{fire: s.fire}
	err := w.Work(context.Background(), &river.Job[fireArgs]{Args: fireArgs{JobID: def.JobID, Slot: slot.Format(slotLayout)}})
	var cancelled *river.JobCancelError
	if !errors.As(err, &cancelled) {
		t.Fatalf("Work = %v (%T), want a river.JobCancelError", err, err)
	}
	if n := e.runner.count(); n != 0 {
		t.Fatalf("%d runs, want 0", n)
	}
}

// TestScheduleManagedWorkdir: with no default workdir, a job scheduled
// without one keeps an empty workdir (each run's session gets a managed
// one), checked against the owner's limits as the managed workdirs' root;
// with no root either, such a job is refused.
func TestScheduleManagedWorkdir(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	root := filepath.Join(e.home, "workspaces")
	for _, tc := range []struct {
		name, root string
	}{{"managed", root}, {"no root", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "jobs.db"), Deps{Defs: e.st, Runner: e.runner, ManagedRoot: tc.root, Now: e.now}, QueueOptions{PollInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(context.Background()) })
			var checked []string
			def, err := s.Schedule(ctx, ScheduleParams{Spec: "@daily", Task: "x", MayRun: func(_, workdir string) error {
				checked = append(checked, workdir)
				return nil
			}})
			if tc.root == "" {
				if !errs.Is(err, errcode.InvalidParams) || !strings.Contains(err.Error(), "workdir is required") {
					t.Fatalf("a job without a workdir on a daemon with no default nor managed root: %v", err)
				}
				return
			}
			if err != nil || def.Workdir != "" || !slices.Equal(checked, []string{root}) {
				t.Fatalf("job without a workdir: workdir %q, limits checked on %v, %v; want \"\" checked on %s", def.Workdir, checked, err, root)
			}
		})
	}
}
