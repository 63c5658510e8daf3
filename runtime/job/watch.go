package job

import "github.com/trellis-run/trellis/internal/broadcast"

// Kinds of job.event.
const (
	EventStarted  = "started"
	EventFinished = "finished"
	EventFailed   = "failed"
	EventDenied   = "denied"
)

// Event is one job.event notification.
type Event struct {
	JobID string
	// Owner is the job's owner ("" = the daemon token): watchers below
	// operator see only their own jobs' events.
	Owner   string
	Kind    string // EventStarted, EventFinished, EventFailed or EventDenied
	Payload map[string]any
}

// Watch is a stream of job events (JobService.Watch).
type Watch = broadcast.Watch[Event]
