package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// States of a job (job.list state).
const (
	StateScheduled = "scheduled"
	StateRunning   = "running"
	StateCancelled = "cancelled"
	StateDone      = "done"
)

// Statuses of a finished run (job.list lastStatus, job.runNow status).
const (
	StatusOK              = "ok"
	StatusError           = "error"
	StatusDeniedByTimeout = "denied_by_timeout"
	// StatusBudgetReached: the run's turn reached the job's budget and
	// paused; the run stopped there (its session stays paused).
	StatusBudgetReached = "budget_reached"
)

// settingsNamespace is where job definitions live in the store's settings
// table, one JSON value per job id: the table every store backend has, so
// definitions need no schema of their own.
const settingsNamespace = "jobs"

// Def is a job definition and the record of its runs, as persisted.
type Def struct {
	JobID string `json:"jobId"`
	Spec  string `json:"spec"`
	Kind  string `json:"kind"`
	Task  string `json:"task"`
	Mode  string `json:"mode"`
	// Workdir is where each run works; "" = each run's session gets a
	// managed workdir of its own (Deps.DefaultWorkdir was "").
	Workdir string `json:"workdir"`
	Agent   string `json:"agent,omitempty"`
	// Owner is the principal that scheduled the job, whose sessions its
	// runs are ("" = the daemon token). OwnerName is its name then.
	Owner     string `json:"owner,omitempty"`
	OwnerName string `json:"ownerName,omitempty"`
	// Channel is the gateway binding each run's answer is posted to.
	Channel string `json:"channel,omitempty"`
	// Budget is each run's session's budget (none when unset).
	Budget    session.Limits `json:"budget,omitzero"`
	CreatedAt time.Time      `json:"createdAt"` // also the anchor of @every slots
	Cancelled bool           `json:"cancelled,omitempty"`
	// Done is set when a once job has fired (or a cron expression has no
	// future date): nothing fires any more.
	Done bool `json:"done,omitempty"`
	// NextRunAt is the next slot, for which a fire is queued (zero: none).
	NextRunAt time.Time `json:"nextRunAt,omitzero"`
	// NextFire is the queue's id of that fire, so that cancel can drop it.
	NextFire      int64     `json:"nextFire,omitempty"`
	LastRunAt     time.Time `json:"lastRunAt,omitzero"`
	LastStatus    string    `json:"lastStatus,omitempty"`
	LastSessionID string    `json:"lastSessionId,omitempty"`
	// Running lists the sessions of the runs in progress.
	Running []string `json:"running,omitempty"`
	// Runs counts the runs started, scheduled and manual.
	Runs int `json:"runs,omitempty"`
	// Advanced is the slot whose fire advanced the schedule and whose run
	// has not started yet (zero: none): a fire put back in the queue
	// before its run started (the daemon lost the job's lease) runs that
	// slot when it is worked again, even a once job's, which the advance
	// marked done.
	Advanced time.Time `json:"advanced,omitzero"`
}

// Enabled reports whether the job still fires on its schedule.
func (d Def) Enabled() bool { return !d.Cancelled && !d.Done }

// State is the job's state for job.list.
func (d Def) State() string {
	switch {
	case len(d.Running) > 0:
		return StateRunning
	case d.Cancelled:
		return StateCancelled
	case d.Done:
		return StateDone
	}
	return StateScheduled
}

func (d Def) schedule() (Schedule, error) { return ParseSpec(d.Spec) }

func (d *Def) addRunning(sessionID string) {
	d.Running = append(d.Running, sessionID)
}

// clearAdvanced forgets the advanced slot once its run started or ended
// (zero slot: a manual run, which leaves it).
func (d *Def) clearAdvanced(slot time.Time) {
	if !slot.IsZero() && d.Advanced.Equal(slot) {
		d.Advanced = time.Time{}
	}
}

func (d *Def) removeRunning(sessionID string) {
	d.Running = slices.DeleteFunc(d.Running, func(s string) bool { return s == sessionID })
}

// defs keeps definitions in a store's settings table.
type defs struct {
	st store.SettingStore
}

func (d defs) get(ctx context.Context, id string) (Def, error) {
	raw, err := d.st.GetSetting(ctx, settingsNamespace, id)
	if errors.Is(err, store.ErrNotFound) {
		return Def{}, ErrNotFound
	}
	if err != nil {
		return Def{}, fmt.Errorf("load job %s: %w", id, err)
	}
	var def Def
	if err := json.Unmarshal(raw, &def); err != nil {
		return Def{}, fmt.Errorf("load job %s: %w", id, err)
	}
	return def, nil
}

func (d defs) put(ctx context.Context, w store.Writer, def Def) error {
	raw, err := json.Marshal(def)
	if err != nil {
		return fmt.Errorf("save job %s: %w", def.JobID, err)
	}
	if err := d.st.PutSetting(ctx, w, settingsNamespace, def.JobID, raw); err != nil {
		return fmt.Errorf("save job %s: %w", def.JobID, err)
	}
	return nil
}

// update applies fn to the saved definition of id atomically when the store
// can (store.SettingUpdater: daemons sharing the store never lose each
// other's changes), else by a read and a write, under w. An error of fn
// aborts the update and is returned.
func (d defs) update(ctx context.Context, w store.Writer, id string, fn func(*Def) error) (Def, error) {
	up, ok := d.st.(store.SettingUpdater)
	if !ok {
		def, err := d.get(ctx, id)
		if err != nil {
			return def, err
		}
		if err := fn(&def); err != nil {
			return def, err
		}
		return def, d.put(ctx, w, def)
	}
	var out Def
	err := up.UpdateSetting(ctx, w, settingsNamespace, id, func(old json.RawMessage) (json.RawMessage, error) {
		var def Def
		if err := json.Unmarshal(old, &def); err != nil {
			return nil, fmt.Errorf("load job %s: %w", id, err)
		}
		if err := fn(&def); err != nil {
			return nil, err
		}
		out = def
		return json.Marshal(def)
	})
	if errors.Is(err, store.ErrNotFound) {
		return Def{}, ErrNotFound
	}
	if err != nil {
		return out, fmt.Errorf("save job %s: %w", id, err)
	}
	return out, nil
}

func (d defs) list(ctx context.Context) ([]Def, error) {
	rows, err := d.st.ListSettings(ctx, settingsNamespace)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out := make([]Def, 0, len(rows))
	for _, r := range rows {
		var def Def
		if err := json.Unmarshal(r.Value, &def); err != nil {
			return nil, fmt.Errorf("load job %s: %w", r.Key, err)
		}
		out = append(out, def)
	}
	return out, nil
}
