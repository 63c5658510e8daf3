package job

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/trellis-run/trellis/protocol/events"
)

// fireKind is the River job kind of a fire; fireQueue the River queue fires
// go through.
const (
	fireKind  = "trellis_job_fire"
	fireQueue = "trellis_jobs"
)

// slotLayout renders a slot in fire arguments (and job.event payloads): the
// protocol's timestamp layout.
const slotLayout = events.TimeFormat

// fireArgs are the arguments of one fire: which job, for which slot. River
// keeps (jobId, slot) unique across every state a row can be in, so a slot
// is queued, and so runs, at most once, also with several daemons.
type fireArgs struct {
	JobID string `json:"jobId" river:"unique"`
	Slot  string `json:"slot" river:"unique"`
}

// Kind is the River job kind.
func (fireArgs) Kind() string { return fireKind }

// fireWorker works fires.
type fireWorker struct {
	river.WorkerDefaults[fireArgs]
	fire func(ctx context.Context, jobID string, slot time.Time) error
}

// Work runs the fire. Its outcome is recorded on the job, not in River: a
// failed run is not retried (it would run its slot twice).
func (w *fireWorker) Work(ctx context.Context, j *river.Job[fireArgs]) error {
	slot, err := time.Parse(slotLayout, j.Args.Slot)
	if err != nil {
		return river.JobCancel(fmt.Errorf("fire of job %s has a bad slot %q: %w", j.Args.JobID, j.Args.Slot, err))
	}
	err = w.fire(ctx, j.Args.JobID, slot)
	switch {
	case errors.Is(err, errStopping):
		// Not an attempt: the next client to start works it.
		return river.JobSnooze(0)
	case errors.Is(err, errClaimLost):
		// Not started here: back to the queue, for whichever daemon
		// holds the job's lease when it is fetched again.
		return river.JobSnooze(time.Second)
	case errors.Is(err, errFireSkipped):
		// A job cancelled while this fire was already fetched: the row
		// ends cancelled, so that a completed fire always means a run.
		return river.JobCancel(err)
	}
	return err
}

// Timeout is -1, no limit: a run lasts as long as its turn; job.cancel and
// the daemon's stop end it.
func (w *fireWorker) Timeout(*river.Job[fireArgs]) time.Duration { return -1 }

// QueueOptions tune the River client; the zero value gives the defaults.
type QueueOptions struct {
	// PollInterval is how often the queue looks for due fires (default
	// 250 ms): a fire starts at most this long after its slot.
	PollInterval time.Duration
	// MaxRuns bounds the fires this daemon works at once (default 16).
	MaxRuns int
	// PollOnly makes River poll instead of listening for notifications.
	// OpenSQLite sets it: SQLite's listener is itself a poll of a table,
	// every 50 ms, which fires do not need.
	PollOnly bool
}

// inserted is what queue.insert reports.
type inserted struct {
	id    int64
	state rivertype.JobState
	dup   bool // the slot was already queued (id and state are that row's)
}

// willRun reports whether the row is still to be worked.
func (i inserted) willRun() bool {
	switch i.state {
	case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStatePending, rivertype.JobStateRetryable:
		return true
	}
	return false
}

// queue is what the service needs of River, whatever its driver.
type queue struct {
	insert func(ctx context.Context, jobID string, slot time.Time) (inserted, error)
	cancel func(ctx context.Context, id int64) error
	start  func(ctx context.Context) error
	stop   func(ctx context.Context) error
}

// newQueue migrates River's tables and builds a client over driver: the
// SQLite driver for the embedded store, riverpgxv5 for Postgres.
func newQueue[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], fire func(context.Context, string, time.Time) error, opts QueueOptions, log *slog.Logger, now rivertype.TimeGenerator) (*queue, error) {
	riverLog := slog.New(warnOnly{log.Handler()})
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: riverLog})
	if err != nil {
		return nil, fmt.Errorf("job queue: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("job queue: migrate River's tables: %w", err)
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &fireWorker{fire: fire}); err != nil {
		return nil, fmt.Errorf("job queue: %w", err)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.MaxRuns <= 0 {
		opts.MaxRuns = 16
	}
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{fireQueue: {MaxWorkers: opts.MaxRuns}},
		Workers:           workers,
		FetchCooldown:     min(50*time.Millisecond, opts.PollInterval),
		FetchPollInterval: opts.PollInterval,
		JobTimeout:        -1,
		MaxAttempts:       1,
		PollOnly:          opts.PollOnly,
		Logger:            riverLog,
		Test:              river.TestConfig{Time: now},
		// A fire becomes workable at its slot by itself: River's scheduler
		// pass (which moves scheduled rows to available) runs only on the
		// elected leader, every few seconds, and after a kill -9 no leader
		// is elected until the dead one's lease expires (about 15 s). Fires
		// are inserted available with scheduled_at = slot instead; River
		// fetches only rows whose scheduled_at has passed.
		Hooks: []rivertype.Hook{river.HookInsertBeginFunc(func(_ context.Context, p *rivertype.JobInsertParams) error {
			if p.Kind == fireKind && p.State == rivertype.JobStateScheduled {
				p.State = rivertype.JobStateAvailable
			}
			return nil
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("job queue: %w", err)
	}
	return &queue{
		insert: func(ctx context.Context, jobID string, slot time.Time) (inserted, error) {
			res, err := client.Insert(ctx, fireArgs{JobID: jobID, Slot: slot.UTC().Format(slotLayout)}, &river.InsertOpts{
				Queue:       fireQueue,
				ScheduledAt: slot,
				MaxAttempts: 1,
				UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()},
			})
			if err != nil {
				return inserted{}, fmt.Errorf("queue the fire of job %s at %s: %w", jobID, slot.Format(slotLayout), err)
			}
			return inserted{id: res.Job.ID, state: res.Job.State, dup: res.UniqueSkippedAsDuplicate}, nil
		},
		cancel: func(ctx context.Context, id int64) error {
			_, err := client.JobCancel(ctx, id)
			if errors.Is(err, rivertype.ErrNotFound) {
				return nil
			}
			return err
		},
		start: client.Start,
		stop:  client.StopAndCancel,
	}, nil
}

// openSQLiteDB opens (creating, mode 0600) the SQLite database River keeps
// its tables in, configured as River's SQLite driver needs: one connection,
// WAL, a busy timeout.
func openSQLiteDB(path string) (*sql.DB, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("job queue: unusable database path %q", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("job queue: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("job queue: %w", err)
	}
	f.Close()
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000&_journal_mode=WAL&_synchronous=FULL")
	if err != nil {
		return nil, fmt.Errorf("job queue: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("job queue: open %s: %w", path, err)
	}
	return db, nil
}

// warnOnly passes on River's warnings and errors; its routine info lines
// (leadership, maintenance passes) would drown the daemon's log.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }
func (h warnOnly) WithGroup(n string) slog.Handler       { return warnOnly{h.Handler.WithGroup(n)} }

// clock is an injected Deps.Now as River's time source: River uses the
// time it returns in its queries (which fires are due) instead of the
// database's own clock.
type clock func() time.Time

func (c clock) Now() time.Time { return c() }

func (c clock) NowOrNil() *time.Time {
	t := c()
	return &t
}
