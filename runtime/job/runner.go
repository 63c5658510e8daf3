package job

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// RunParams describe one run of a job.
type RunParams struct {
	JobID   string
	Task    string
	Mode    string
	Workdir string
	Agent   string
	// Owner owns the run's session ("" = the daemon token).
	Owner string
	// Budget is the run's session's budget (none when unset).
	Budget session.Limits
}

// Outcome is how a run ended.
type Outcome struct {
	SessionID string
	Status    string // StatusOK, StatusError, StatusDeniedByTimeout or StatusBudgetReached
	Reason    string // the turn.done reason ("" when the turn never ran)
	Error     string // why the run failed, for people ("" when it did not)
	Answer    string // the turn's last assistant message ("" when none)
}

// Runner runs a job's task once. Run calls started with the run's session
// id as soon as the run has begun, and returns when the run has ended.
// When ctx ends, the run is interrupted and Run still returns its outcome.
// An error means no run happened.
type Runner interface {
	Run(ctx context.Context, p RunParams, started func(sessionID string)) (Outcome, error)
}

// Sessions is what SessionRunner needs of runtime/session.
type Sessions interface {
	Create(ctx context.Context, p session.CreateParams) (string, error)
	Prompt(ctx context.Context, id, text string, atts []session.Attachment, origin string) (string, error)
	Interrupt(ctx context.Context, id string) error
}

// Events is what SessionRunner needs of runtime/eventlog.
type Events interface {
	Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*eventlog.Subscription, error)
}

// SessionRunner runs a task as the prompt of a new session of kind
// scheduled. The session has no origin, so its approvals go to the
// unattended queue, where they time out unless someone answers.
type SessionRunner struct {
	sessions Sessions
	events   Events
	// interruptGrace bounds the wait for turn.done after an interrupt.
	interruptGrace time.Duration
}

// NewSessionRunner returns a runner over the session service and its log.
func NewSessionRunner(sessions Sessions, events Events) *SessionRunner {
	return &SessionRunner{sessions: sessions, events: events, interruptGrace: 15 * time.Second}
}

// Run creates the session, prompts it with the task and follows its events
// until the turn ends.
func (r *SessionRunner) Run(ctx context.Context, p RunParams, started func(string)) (Outcome, error) {
	id, err := r.sessions.Create(ctx, session.CreateParams{
		Workdir: p.Workdir, Mode: p.Mode, Agent: p.Agent,
		Kind: store.KindScheduled, JobID: p.JobID, Owner: p.Owner, Budget: p.Budget,
	})
	if err != nil {
		return Outcome{}, err
	}
	// Subscribe before prompting: no event of the turn can be missed. The
	// subscription outlives ctx so that an interrupted turn's end is seen.
	bg := context.WithoutCancel(ctx)
	sub, err := r.events.Subscribe(bg, id, 0)
	if err != nil {
		return Outcome{SessionID: id}, err
	}
	defer sub.Close()
	turnID, err := r.sessions.Prompt(ctx, id, p.Task, nil, "")
	if err != nil {
		return Outcome{SessionID: id}, err
	}
	if started != nil {
		started(id)
	}
	return r.follow(ctx, id, turnID, sub), nil
}

// follow reads the session's events until turn.done of turnID, interrupting
// the session once ctx ends.
func (r *SessionRunner) follow(ctx context.Context, id, turnID string, sub *eventlog.Subscription) Outcome {
	out := Outcome{SessionID: id, Status: StatusError}
	timedOut := false
	done := ctx.Done()
	var grace <-chan time.Time
	for {
		select {
		case it, ok := <-sub.Items():
			if !ok {
				out.Error = "the session's event stream ended before the turn did (the daemon is stopping)"
				return out
			}
			if it.Event == nil {
				continue
			}
			switch it.Event.Kind {
			case eventkind.MessageDone:
				var m struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(it.Event.Payload, &m) == nil {
					out.Answer = m.Text
				}
			case eventkind.Error:
				var e events.ErrorEvent
				if json.Unmarshal(it.Event.Payload, &e) == nil {
					if e.Code == errcode.ApprovalTimeout {
						timedOut = true
					}
					if out.Error == "" {
						out.Error = e.Message
					}
				}
			case eventkind.TurnPaused:
				// The run's budget is reached: the run stops here, and its
				// session stays paused (session.setBudget resumes it).
				var pe events.TurnPausedEvent
				if json.Unmarshal(it.Event.Payload, &pe) != nil || pe.TurnID != turnID {
					continue
				}
				out.Status, out.Reason = StatusBudgetReached, pe.Reason
				out.Error = "the run's budget is reached: its turn paused before a model call"
				if pe.Budget != nil && pe.Spent != nil {
					out.Error += fmt.Sprintf(" (spent %d micro-USD, %d tokens)", pe.Spent.CostMicroUsd, pe.Spent.Tokens)
				}
				return out
			case eventkind.TurnDone:
				var d events.TurnDoneEvent
				if json.Unmarshal(it.Event.Payload, &d) != nil || d.TurnID != turnID {
					continue
				}
				out.Reason = d.Reason
				out.Status = statusOf(d.Reason, timedOut)
				switch {
				case out.Status == StatusOK:
					out.Error = ""
				case out.Error == "":
					out.Error = "the turn ended: " + d.Reason
				}
				return out
			}
		case <-done:
			done = nil
			_ = r.sessions.Interrupt(context.WithoutCancel(ctx), id)
			grace = time.After(r.interruptGrace)
		case <-grace:
			out.Error = fmt.Sprintf("the interrupted turn did not end within %s", r.interruptGrace)
			return out
		}
	}
}

// statusOf turns a turn's end into a run status: a run in which an approval
// timed out is denied_by_timeout whatever the turn did next, a completed
// turn is ok, anything else (error, interrupted, denied, budget) is error.
func statusOf(reason string, approvalTimedOut bool) string {
	switch {
	case approvalTimedOut:
		return StatusDeniedByTimeout
	case reason == events.TurnDoneReasonComplete:
		return StatusOK
	}
	return StatusError
}
