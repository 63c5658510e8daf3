package job

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/trellis-run/trellis/internal/broadcast"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivertype"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/telemetry"
)

// Sentinel causes of the service's errors; the errors themselves carry a
// protocol code (runtime/errs) and a message for people.
var (
	// ErrNotFound: no job has that id (not_found).
	ErrNotFound = errors.New("job not found")
	// ErrLagged: a watcher fell more than its backlog behind and was dropped.
	ErrLagged = broadcast.ErrLagged
	// ErrClosed: the service has stopped.
	ErrClosed = errors.New("job service stopped")

	// errStopping: a fire was fetched while the service stops.
	errStopping = errors.New("the daemon is stopping")
)

// Modes a job's sessions can run in.
var modes = map[string]bool{"plan": true, "accept": true, "auto": true}

// DefaultMode is the mode of a job scheduled without one.
const DefaultMode = "accept"

// cancelWait bounds how long Cancel waits for the job's interrupted runs to
// record their end.
const cancelWait = 20 * time.Second

// Deps are the job service's collaborators.
type Deps struct {
	// Defs keeps the job definitions (the daemon's store).
	Defs store.SettingStore
	// Runner runs a job's task (a SessionRunner in the daemon).
	Runner Runner
	// Log receives the service's and River's logs (nil: discarded).
	Log *slog.Logger
	// Now is the clock (nil: time.Now). When set, it is River's clock too
	// (its Config.Test.Time), so that a test can move time forward for the
	// schedules and the queue together instead of sleeping through slots.
	Now func() time.Time
	// DefaultWorkdir is the workdir of a job scheduled without one (the
	// operator's trellisd --workdir). "": each run of such a job gets a
	// managed workdir of its own under ManagedRoot (a session created
	// without a workdir), which follows the run's session to the daemon
	// taking it over; with ManagedRoot "" too, such jobs are refused.
	// The daemon's cwd is never used.
	DefaultWorkdir string
	// ManagedRoot is the session service's managed workdirs' root
	// (session.Deps.ManagedRoot): the owner's workdir limits are checked
	// against it when a job without a workdir is scheduled.
	ManagedRoot string
	// AgentExists checks job.schedule's agent (nil: any name is taken).
	AgentExists func(name string) error
	// Channels posts each run's answer to job.schedule's channel (nil: a
	// job with a channel is unsupported).
	Channels ChannelPoster
	// OwnerMayRun checks before each run that the job's owner (not "")
	// may still run it: a deleted or demoted owner's run fails with its
	// error (nil: no check).
	OwnerMayRun func(ctx context.Context, owner, jobID string) error
	// Leases, on a store several daemons share, fences each run's start
	// (scheduled or job.runNow) and its channel post (runtime/cluster.Node); nil: this
	// daemon alone works the fires.
	Leases Leases
}

// Leases hands out the named leases shared by the daemons of a cluster.
type Leases interface {
	// AcquireResource takes or keeps the lease key; false when another
	// live daemon holds it. onLost runs if it is later taken over.
	AcquireResource(ctx context.Context, key string, onLost func()) (bool, error)
	// Release gives the lease back, if held.
	Release(ctx context.Context, key string)
	// Fence returns the lease this daemon holds on key (a resource's or a
	// session's), judged on its own monotonic clock: ok false when it
	// holds none or its last renewal is too old to be sure of it.
	Fence(key string) (store.Fence, bool)
}

// ChannelPoster is what a job's channel needs of the gateway.
type ChannelPoster interface {
	// ChannelExists checks a channel (a binding id) at schedule time.
	ChannelExists(channel string) error
	// Post sends text to the channel, recording the post under w first
	// (the lease of the run's session): refused, it is not made.
	Post(ctx context.Context, w store.Writer, channel, text string) error
}

// Service schedules jobs and runs their fires. Each schedule has at most
// one queued fire, for its next slot; working a fire queues the one after
// it, then runs the task. It is safe for concurrent use.
type Service struct {
	deps    Deps
	defs    defs
	runner  Runner
	log     *slog.Logger
	now     func() time.Time
	q       *queue
	closeDB func() error

	mu       sync.Mutex // serialises the read-modify-write of definitions
	starting jobLocks   // one start of a job at a time in this daemon (claim)

	runMu      sync.Mutex
	active     map[string]map[*activeRun]struct{} // runs in progress, by job id
	stopping   bool
	runs       sync.WaitGroup
	manualCtx  context.Context // parent of job.runNow runs; Stop cancels it
	stopManual context.CancelFunc

	watch broadcast.Hub[Event]

	stopOnce sync.Once
	stopErr  error
}

// activeRun is a run in progress on this daemon.
type activeRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a service whose fires go through River on driver
// (riversqlite for the embedded store, riverpgxv5 for Postgres); River's
// tables are migrated. Start starts it.
func New[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], deps Deps, opts QueueOptions) (*Service, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	var riverClock rivertype.TimeGenerator
	if deps.Now == nil {
		deps.Now = time.Now
	} else {
		riverClock = clock(deps.Now)
	}
	s := &Service{
		deps:   deps,
		defs:   defs{st: deps.Defs},
		runner: deps.Runner,
		log:    deps.Log,
		now:    func() time.Time { return deps.Now().UTC() },
		active: map[string]map[*activeRun]struct{}{},
	}
	s.manualCtx, s.stopManual = context.WithCancel(context.Background())
	q, err := newQueue(ctx, driver, s.fire, opts, deps.Log, riverClock)
	if err != nil {
		return nil, err
	}
	s.q = q
	return s, nil
}

// OpenSQLite is New on River's SQLite driver over the database at path
// (created if missing), which the service closes when it stops.
func OpenSQLite(ctx context.Context, path string, deps Deps, opts QueueOptions) (*Service, error) {
	opts.PollOnly = true
	db, err := openSQLiteDB(path)
	if err != nil {
		return nil, err
	}
	s, err := New[*sql.Tx](ctx, riversqlite.New(db), deps, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.closeDB = db.Close
	return s, nil
}

// Start catches up on the slots missed while no daemon ran, then starts
// working fires. For each enabled job whose next slot has passed it queues
// exactly one run (for that slot, unique by job and slot) and the next
// future slot: a schedule that missed several slots runs once, not once
// per slot.
func (s *Service) Start(ctx context.Context) error {
	list, err := s.defs.list(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	for _, def := range list {
		if err := s.reconcile(ctx, def.JobID, now); err != nil {
			s.log.Error("job not rescheduled", "jobId", def.JobID, "err", err)
		}
	}
	return s.q.start(context.WithoutCancel(ctx))
}

// reconcile brings one job's queued fires in line with its definition at
// start.
func (s *Service) reconcile(ctx context.Context, id string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	def, err := s.defs.get(ctx, id)
	if err != nil {
		return err
	}
	if len(def.Running) > 0 {
		// The previous daemon died during these runs (a clean stop records
		// their end); the session service closed their turns as interrupted.
		s.log.Info("job runs cut short by the previous daemon's end", "jobId", id, "sessions", def.Running)
		def.Running = nil
		def.LastStatus = StatusError
	}
	if !def.Enabled() {
		return s.defs.put(ctx, store.Unfenced(), def)
	}
	sched, err := def.schedule()
	if err != nil {
		return err
	}
	switch {
	case def.NextRunAt.IsZero():
		// No slot recorded: queue the next one.
	case def.NextRunAt.After(now):
		// The fire exists (it is queued before the definition records
		// it); inserting again is a no-op that returns its id.
		ins, err := s.q.insert(ctx, id, def.NextRunAt)
		if err != nil {
			return err
		}
		def.NextFire = ins.id
		return s.defs.put(ctx, store.Unfenced(), def)
	default:
		missed := def.NextRunAt
		ins, err := s.q.insert(ctx, id, missed)
		if err != nil {
			return err
		}
		catchUp := missed
		if ins.dup && !ins.willRun() {
			// That slot's fire was worked, or was being worked when the
			// daemon died, before the slot after it was recorded: catch up
			// with the latest slot that has passed instead, if later.
			if last := sched.lastSlot(def.CreatedAt, missed, now); last.After(missed) {
				if _, err := s.q.insert(ctx, id, last); err != nil {
					return err
				}
				catchUp = last
			}
		}
		s.log.Info("job missed slots while no daemon ran: one catch-up run", "jobId", id, "firstMissed", missed.Format(slotLayout), "catchUpSlot", catchUp.Format(slotLayout))
	}
	next := sched.Next(def.CreatedAt, now)
	if next.IsZero() {
		// A once job: its catch-up fire is its run and marks it done.
		return s.defs.put(ctx, store.Unfenced(), def)
	}
	ins, err := s.q.insert(ctx, id, next)
	if err != nil {
		return err
	}
	def.NextRunAt, def.NextFire = next, ins.id
	return s.defs.put(ctx, store.Unfenced(), def)
}

// Stop stops working fires, interrupts the runs in progress (each records
// its end) and releases the queue's database. ctx bounds the wait. Calls
// after the first return the first one's error.
func (s *Service) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Service) stop(ctx context.Context) error {
	s.runMu.Lock()
	s.stopping = true
	s.runMu.Unlock()
	err := s.q.stop(ctx)
	s.stopManual()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("job runs still recording their end: %w", ctx.Err()))
	}
	s.watch.Close()
	if s.closeDB != nil {
		err = errors.Join(err, s.closeDB())
	}
	return err
}

// ScheduleParams are the inputs of Schedule.
type ScheduleParams struct {
	Spec    string
	Task    string
	Mode    string // "" = DefaultMode
	Workdir string // "" = Deps.DefaultWorkdir, else a managed workdir per run
	Agent   string
	Channel string // "" = none; else a gateway binding id
	// Budget is the budget of each run's session (none when unset).
	Budget session.Limits
	// Owner is the principal scheduling the job, which owns the sessions
	// of its runs ("" = the daemon token); OwnerName names it.
	Owner, OwnerName string
	// MayRun, when set, checks the job's agent ("" = the default agent)
	// and resolved workdir against the owner's limits
	// (auth.Principal.MayRun); each run's session is checked again.
	MayRun func(agent, workdir string) error
}

// Schedule validates p, saves the job and queues its first slot.
func (s *Service) Schedule(ctx context.Context, p ScheduleParams) (Def, error) {
	sched, err := ParseSpec(p.Spec)
	if err != nil {
		return Def{}, errs.Wrap(errcode.InvalidParams, err, "%s", err.Error())
	}
	if strings.TrimSpace(p.Task) == "" {
		return Def{}, errs.New(errcode.InvalidParams, "task is empty: it is the prompt each run sends")
	}
	if p.Mode == "" {
		p.Mode = DefaultMode
	}
	if !modes[p.Mode] {
		return Def{}, errs.New(errcode.InvalidParams, "mode %q is not one of plan, accept, auto", p.Mode)
	}
	if err := p.Budget.Validate(); err != nil {
		return Def{}, err
	}
	// wd stays "" for a job whose runs get managed workdirs; check is
	// where the owner's workdir limits are checked.
	wd, check := "", s.deps.ManagedRoot
	switch {
	case strings.TrimSpace(p.Workdir) != "":
		if wd, err = session.ResolveWorkdir(p.Workdir); err != nil {
			return Def{}, err
		}
		check = wd
	case s.deps.DefaultWorkdir != "":
		if err := os.MkdirAll(s.deps.DefaultWorkdir, 0o700); err != nil {
			return Def{}, fmt.Errorf("create the default workdir: %w", err)
		}
		if wd, err = session.ResolveWorkdir(s.deps.DefaultWorkdir); err != nil {
			return Def{}, err
		}
		check = wd
	case s.deps.ManagedRoot == "":
		return Def{}, errs.New(errcode.InvalidParams, "workdir is required: this daemon has no default workdir (start it with --workdir)")
	}
	if p.Agent != "" && s.deps.AgentExists != nil {
		if err := s.deps.AgentExists(p.Agent); err != nil {
			return Def{}, err
		}
	}
	if p.MayRun != nil {
		if err := p.MayRun(p.Agent, check); err != nil {
			return Def{}, err
		}
	}
	if p.Channel != "" {
		if s.deps.Channels == nil {
			return Def{}, errs.NewUnsupported("channel", p.Channel, "job channels need the gateway, which this daemon does not run")
		}
		if err := s.deps.Channels.ChannelExists(p.Channel); err != nil {
			return Def{}, err
		}
	}
	now := s.now().Truncate(time.Millisecond)
	first := sched.Next(now, now)
	if first.IsZero() {
		return Def{}, errs.New(errcode.InvalidParams, "spec %q: that time has passed (now %s)", p.Spec, now.Format(slotLayout))
	}
	def := Def{
		JobID: ids.New("j"), Spec: strings.TrimSpace(p.Spec), Kind: sched.Kind(), Task: p.Task,
		Mode: p.Mode, Workdir: wd, Agent: p.Agent, Channel: p.Channel, Budget: p.Budget, CreatedAt: now, NextRunAt: first,
		Owner: p.Owner, OwnerName: p.OwnerName,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Fire first: a fire whose job is missing is skipped, a job without its
	// fire would never run.
	ins, err := s.q.insert(ctx, def.JobID, first)
	if err != nil {
		return Def{}, err
	}
	def.NextFire = ins.id
	if err := s.defs.put(ctx, store.Unfenced(), def); err != nil {
		return Def{}, err
	}
	s.log.Info("job scheduled", "jobId", def.JobID, "spec", def.Spec, "nextRunAt", first.Format(slotLayout))
	return def, nil
}

// List returns every job, newest first.
func (s *Service) List(ctx context.Context) ([]Def, error) {
	list, err := s.defs.list(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(list, func(a, b Def) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return list, nil
}

// Count counts the enabled jobs (system.info counters.jobs).
func (s *Service) Count(ctx context.Context) int {
	list, err := s.defs.list(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range list {
		if d.Enabled() {
			n++
		}
	}
	return n
}

func (s *Service) get(ctx context.Context, id string) (Def, error) {
	if strings.TrimSpace(id) == "" {
		return Def{}, errs.New(errcode.InvalidParams, "jobId is required")
	}
	def, err := s.defs.get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Def{}, errs.Wrap(errcode.NotFound, ErrNotFound, "job %s not found", id)
	}
	return def, err
}

// update applies fn to the saved definition of id.
func (s *Service) update(ctx context.Context, w store.Writer, id string, fn func(*Def)) (Def, error) {
	if strings.TrimSpace(id) == "" {
		return Def{}, errs.New(errcode.InvalidParams, "jobId is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	def, err := s.defs.update(ctx, w, id, func(d *Def) error { fn(d); return nil })
	if errors.Is(err, ErrNotFound) {
		return Def{}, errs.Wrap(errcode.NotFound, ErrNotFound, "job %s not found", id)
	}
	return def, err
}

// Cancel disables the job's future fires, drops its queued fire and
// interrupts its runs in progress, waiting (boundedly) until they have
// recorded their end. The job and its history are kept.
func (s *Service) Cancel(ctx context.Context, id string) error {
	var fire int64
	if _, err := s.update(ctx, store.Unfenced(), id, func(d *Def) {
		fire = d.NextFire
		d.Cancelled, d.NextRunAt, d.NextFire = true, time.Time{}, 0
	}); err != nil {
		return err
	}
	if fire != 0 {
		// A fire that escapes this (already fetched) is skipped: the job
		// is disabled.
		if err := s.q.cancel(ctx, fire); err != nil {
			s.log.Warn("cancel queued fire", "jobId", id, "err", err)
		}
	}
	s.runMu.Lock()
	runs := make([]*activeRun, 0, len(s.active[id]))
	for r := range s.active[id] {
		runs = append(runs, r)
	}
	s.runMu.Unlock()
	wait, stop := context.WithTimeout(ctx, cancelWait)
	defer stop()
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		select {
		case <-r.done:
		case <-wait.Done():
			s.log.Warn("cancelled job's run still ending", "jobId", id)
			return nil
		}
	}
	s.log.Info("job cancelled", "jobId", id, "interrupted", len(runs))
	return nil
}

// RunNow runs the job once, outside its schedule (also when it is done),
// and returns when the run has ended. A cancelled job does not run:
// cancelling disables it (invalid_params). The run does not
// depend on ctx: if the caller goes away it goes on, and job.cancel or the
// daemon's stop interrupts it.
//
// Like a scheduled fire, the run starts under the job's lease: this daemon
// takes it, re-reads the job with a write the store fences with it, and
// starts the run only while its own clock says it still holds it. Another
// daemon starting a run of the job this moment, or this one losing the
// lease first, is overloaded (retry), with nothing run.
func (s *Service) RunNow(ctx context.Context, id string) (Outcome, error) {
	if _, err := s.get(ctx, id); err != nil {
		return Outcome{}, err
	}
	c, err := s.claimWithin(ctx, id, runNowClaimWait)
	if err != nil {
		return Outcome{}, runNowRefused(id, err)
	}
	def, err := s.update(ctx, c.writer(), id, func(*Def) {})
	if err != nil {
		c.release()
		return Outcome{}, runNowRefused(id, err)
	}
	if def.Cancelled {
		c.release()
		return Outcome{}, errs.New(errcode.InvalidParams, "job %s is cancelled, so it does not run: schedule it again to run it", id)
	}
	type result struct {
		out Outcome
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer c.release()
		out, err := s.run(s.manualCtx, def, time.Time{}, c)
		ch <- result{out, runNowRefused(id, err)}
	}()
	select {
	case r := <-ch:
		return r.out, r.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// runNowClaimWait is how long job.runNow waits for another daemon's start
// of the job to give the job's lease back (it holds it only while a run
// starts) before it answers overloaded.
const runNowClaimWait = 5 * time.Second

// claimWithin is claim, tried again while another daemon holds the job's
// lease, for up to wait.
func (s *Service) claimWithin(ctx context.Context, jobID string, wait time.Duration) (fireClaim, error) {
	deadline := time.Now().Add(wait)
	for {
		c, err := s.claim(ctx, jobID)
		if !errors.Is(err, errClaimLost) || time.Now().After(deadline) {
			return c, err
		}
		t := time.NewTimer(time.Duration(10+rand.IntN(40)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fireClaim{}, ctx.Err()
		case <-t.C:
		}
	}
}

// runNowRefused turns a lost claim on job id (errClaimLost, or the store
// refusing the fenced write) into the retryable error job.runNow answers;
// other errors pass unchanged.
func runNowRefused(id string, err error) error {
	if errors.Is(err, errClaimLost) || errors.Is(err, store.ErrLeaseLost) {
		return errs.Wrap(errcode.Overloaded, err, "job %s did not run: another daemon is starting a run of it or took its lease over; try again", id).WithData("retryAfterMs", 1000)
	}
	return err
}

// Get returns the definition of job id (not_found when there is none).
func (s *Service) Get(ctx context.Context, id string) (Def, error) { return s.get(ctx, id) }

// Watch streams job events until ctx ends.
func (s *Service) Watch(ctx context.Context) *Watch { return s.watch.Add(ctx) }

// fire works the fire of one slot: it queues the next slot, then runs the
// task. Its error, if any, is the queue's to log; the run's outcome is
// recorded on the job.
func (s *Service) fire(ctx context.Context, id string, slot time.Time) error {
	if s.isStopping() {
		// Fetched as the daemon stops: the fire goes back to the queue
		// untouched and is worked at the next start.
		return errStopping
	}
	c, err := s.claim(ctx, id)
	if err != nil {
		return err
	}
	defer c.release()
	def, ok, err := s.advance(ctx, c.writer(), id, slot)
	if errors.Is(err, store.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", errClaimLost, err)
	}
	if err != nil {
		return err
	}
	if !ok {
		return errFireSkipped
	}
	_, err = s.run(ctx, def, slot, c)
	if errors.Is(err, errClaimLost) {
		return err
	}
	return nil
}

// claimKey names the lease under which a daemon starts a job's scheduled
// runs.
func claimKey(jobID string) string { return "job/" + jobID }

// errClaimLost: this daemon lost (or never got) the job's lease before the
// run started; the fire goes back to the queue untouched, for the daemon
// that holds the lease.
var errClaimLost = errors.New("the job's lease is not this daemon's")

// fireClaim is the lease a fire's run starts under (zero without Leases).
type fireClaim struct {
	s      *Service
	key    string
	once   *sync.Once
	unlock func() // lets the next start of the job in this daemon claim
}

// claim takes the job's lease for a fire, as a session's lease is taken
// before its turn runs: the fire's slot is advanced under it (a fenced
// write) and its run starts only while this daemon still holds it. Another
// daemon holding it (starting a run of the same job this moment) is
// errClaimLost.
func (s *Service) claim(ctx context.Context, jobID string) (fireClaim, error) {
	if s.deps.Leases == nil {
		return fireClaim{}, nil
	}
	key := claimKey(jobID)
	// The daemon holds one lease per job, and a start gives it back: two
	// starts of the job here (a fire and a job.runNow) take turns, so that
	// one does not give back the lease the other starts under.
	unlock := s.starting.lock(ctx, jobID)
	if unlock == nil {
		return fireClaim{}, ctx.Err()
	}
	got, err := s.deps.Leases.AcquireResource(ctx, key, nil)
	if err != nil {
		unlock()
		return fireClaim{}, err
	}
	if !got {
		unlock()
		return fireClaim{}, fmt.Errorf("%w: another daemon holds %s", errClaimLost, key)
	}
	return fireClaim{s: s, key: key, once: &sync.Once{}, unlock: unlock}, nil
}

// writer returns the writer of the claim's lease: a write made under it is
// refused once another daemon took the lease over. Without a cluster (no
// claim key), store.Unfenced.
func (c fireClaim) writer() store.Writer {
	if c.key == "" {
		return store.Unfenced()
	}
	f, ok := c.s.deps.Leases.Fence(c.key)
	if !ok {
		f = store.Fence{Key: c.key} // none valid: matches no lease, refused
	}
	return store.Under(f)
}

// check reports, right before the run starts, whether this daemon still
// holds the claim by its own clock.
func (c fireClaim) check() error {
	if c.key == "" {
		return nil
	}
	if _, ok := c.s.deps.Leases.Fence(c.key); !ok {
		return fmt.Errorf("%w: %s ran past its renewal", errClaimLost, c.key)
	}
	return nil
}

// release gives the claim back once (the run has started or not run):
// the runs of one job may overlap, on any daemon.
func (c fireClaim) release() {
	if c.key == "" {
		return
	}
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.s.deps.Leases.Release(ctx, c.key)
		c.unlock()
	})
}

// jobLocks are per-job locks whose waits end with a context.
type jobLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{} // by job id; closed when its holder unlocks
}

// lock takes job id's lock once no one holds it and returns its unlock;
// nil when ctx ended first.
func (l *jobLocks) lock(ctx context.Context, id string) func() {
	for {
		l.mu.Lock()
		freed, busy := l.held[id]
		if !busy {
			if l.held == nil {
				l.held = map[string]chan struct{}{}
			}
			mine := make(chan struct{})
			l.held[id] = mine
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, id)
				l.mu.Unlock()
				close(mine)
			}
		}
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil
		}
	}
}

// errFireSkipped is fire's answer for a slot of a job that no longer
// fires (cancelled, disabled or deleted after the slot was queued): no run
// happened, and the queue records the fire as cancelled, not completed.
var errFireSkipped = errors.New("the job no longer fires: slot skipped")

// advance queues the slot after slot (the first one in the future: slots
// missed meanwhile are skipped) and returns the job; ok is false when the
// job no longer fires.
func (s *Service) advance(ctx context.Context, w store.Writer, id string, slot time.Time) (Def, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// In one store transaction holding the definition: a daemon cancelling
	// or firing the same job at once waits, and no change is lost.
	def, err := s.defs.update(ctx, w, id, func(def *Def) error {
		if !def.Cancelled && def.Advanced.Equal(slot) {
			return nil // advanced by an earlier attempt whose run never started
		}
		if !def.Enabled() {
			return errSkipFire
		}
		def.Advanced = slot
		sched, err := def.schedule()
		if err != nil {
			return err
		}
		next := sched.Next(def.CreatedAt, later(s.now(), slot))
		switch {
		case next.IsZero():
			def.Done, def.NextRunAt, def.NextFire = true, time.Time{}, 0
		case next.After(def.NextRunAt):
			ins, err := s.q.insert(ctx, id, next)
			if err != nil {
				// This slot still runs; the next start re-queues the schedule.
				s.log.Error("next slot not queued", "jobId", id, "err", err)
				break
			}
			def.NextRunAt, def.NextFire = next, ins.id
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNotFound):
		s.log.Warn("fire of an unknown job skipped", "jobId", id, "slot", slot.Format(slotLayout))
		return def, false, nil
	case errors.Is(err, errSkipFire):
		s.log.Info("fire of a disabled job skipped", "jobId", id, "slot", slot.Format(slotLayout))
		return def, false, nil
	case err != nil:
		return def, false, err
	}
	return def, true, nil
}

// errSkipFire aborts advance's update: the job no longer fires.
var errSkipFire = errors.New("the job no longer fires")

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// run runs def's task once (for slot, or manually when slot is zero),
// records the run on the job and publishes its events. A scheduled run
// starts only while this daemon holds c (else it returns errClaimLost
// having recorded and published nothing).
func (s *Service) run(parent context.Context, def Def, slot time.Time, c fireClaim) (Outcome, error) {
	r, ok := s.register(parent, def.JobID)
	if !ok {
		return Outcome{}, errs.New(errcode.Overloaded, "the daemon is stopping; job %s did not run", def.JobID).WithData("retryAfterMs", 1000)
	}
	defer s.unregister(def.JobID, r)
	bg := context.WithoutCancel(parent)
	startedAt := s.now()
	base := map[string]any{"slot": nil, "trigger": "manual"}
	if !slot.IsZero() {
		base["slot"], base["trigger"] = slot.Format(slotLayout), "schedule"
	}
	var out Outcome
	err := s.ownerMayRun(r.ctx, def)
	if err == nil {
		if cerr := c.check(); cerr != nil {
			s.log.Warn("scheduled job run not started: this daemon no longer holds the job's lease", "jobId", def.JobID, "err", cerr)
			return Outcome{}, cerr
		}
		out, err = s.runner.Run(r.ctx, RunParams{
			JobID: def.JobID, Task: def.Task, Mode: def.Mode, Workdir: def.Workdir, Agent: def.Agent, Owner: def.Owner, Budget: def.Budget,
		}, func(sessionID string) {
			// The start is recorded under the claim, then the claim is
			// given back: the run goes on under its session's lease.
			_, err := s.update(bg, c.writer(), def.JobID, func(d *Def) {
				d.LastRunAt, d.LastSessionID = startedAt, sessionID
				d.addRunning(sessionID)
				d.Runs++
				d.clearAdvanced(slot)
			})
			c.release()
			if err != nil {
				s.log.Error("record job run start", "jobId", def.JobID, "err", err)
			}
			s.watch.Publish(Event{JobID: def.JobID, Owner: def.Owner, Kind: EventStarted, Payload: with(base, map[string]any{
				"sessionId": sessionID, "startedAt": startedAt.Format(slotLayout),
			})})
		})
	}
	if err != nil {
		out.Status, out.Error = StatusError, err.Error()
	}
	if _, uerr := s.update(bg, store.Unfenced(), def.JobID, func(d *Def) {
		d.LastRunAt, d.LastStatus = startedAt, out.Status
		d.clearAdvanced(slot)
		if out.SessionID != "" {
			d.LastSessionID = out.SessionID
			d.removeRunning(out.SessionID)
		}
	}); uerr != nil {
		s.log.Error("record job run end", "jobId", def.JobID, "err", uerr)
	}
	var sessionID any
	if out.SessionID != "" {
		sessionID = out.SessionID
	}
	var reason, errText any
	if out.Reason != "" {
		reason = out.Reason
	}
	if out.Error != "" {
		errText = out.Error
	}
	s.watch.Publish(Event{JobID: def.JobID, Owner: def.Owner, Kind: eventKindOf(out.Status), Payload: with(base, map[string]any{
		"sessionId": sessionID, "status": out.Status, "reason": reason, "error": errText,
		"startedAt": startedAt.Format(slotLayout), "durationMs": s.now().Sub(startedAt).Milliseconds(),
	})})
	telemetry.JobRun(out.Status)
	s.log.InfoContext(parent, "job run ended", "jobId", def.JobID, "sessionId", out.SessionID, "slot", base["slot"], "status", out.Status)
	if def.Channel != "" && s.deps.Channels != nil && err == nil {
		text := out.Answer
		if out.Status != StatusOK {
			text = fmt.Sprintf("job %s failed: %s", def.JobID, out.Error)
		} else if text == "" {
			text = "(no answer)"
		}
		if perr := s.post(bg, def, out.SessionID, text); perr != nil {
			s.log.Warn("post the job's answer to its channel", "jobId", def.JobID, "channel", def.Channel, "err", perr)
		}
	}
	return out, err
}

// post sends a run's answer to def's channel under the lease of the run's
// session: a daemon deposed from that session (another one took it over)
// posts nothing, and the gateway records the post under that fence before
// making it.
func (s *Service) post(ctx context.Context, def Def, sessionID, text string) error {
	w := store.Unfenced()
	if s.deps.Leases != nil && sessionID != "" {
		f, ok := s.deps.Leases.Fence(sessionID)
		if !ok {
			return fmt.Errorf("not posted: this daemon no longer holds the lease of the run's session %s", sessionID)
		}
		w = store.Under(f)
	}
	return s.deps.Channels.Post(ctx, w, def.Channel, text)
}

// ownerMayRun is Deps.OwnerMayRun for def.
func (s *Service) ownerMayRun(ctx context.Context, def Def) error {
	if def.Owner == "" || s.deps.OwnerMayRun == nil {
		return nil
	}
	return s.deps.OwnerMayRun(ctx, def.Owner, def.JobID)
}

func eventKindOf(status string) string {
	switch status {
	case StatusOK:
		return EventFinished
	case StatusDeniedByTimeout:
		return EventDenied
	}
	return EventFailed
}

func with(base, more map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(more))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

func (s *Service) isStopping() bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.stopping
}

// register records a run in progress; false once the service is stopping.
func (s *Service) register(parent context.Context, jobID string) (*activeRun, bool) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if s.stopping {
		return nil, false
	}
	ctx, cancel := context.WithCancel(parent)
	r := &activeRun{ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if s.active[jobID] == nil {
		s.active[jobID] = map[*activeRun]struct{}{}
	}
	s.active[jobID][r] = struct{}{}
	s.runs.Add(1)
	return r, true
}

func (s *Service) unregister(jobID string, r *activeRun) {
	s.runMu.Lock()
	delete(s.active[jobID], r)
	if len(s.active[jobID]) == 0 {
		delete(s.active, jobID)
	}
	s.runMu.Unlock()
	r.cancel()
	close(r.done)
	s.runs.Done()
}
