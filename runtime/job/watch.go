package job

import "github.com/trellis-run/trellis/runtime/watch"

// Kinds of job.event.
const (
	EventStarted  = "started"
	EventFinished = "finished"
	EventFailed   = "failed"
	EventDenied   = "denied"
)

// Event is one job.event notification.
type Event struct {
	JobID   string
	Kind    string // EventStarted, EventFinished, EventFailed or EventDenied
	Payload map[string]any
}

// Watch is a stream of job events (JobService.Watch).
type Watch = watch.Watch[Event]
