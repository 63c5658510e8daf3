package skill

import "github.com/trellis-run/trellis/internal/broadcast"

// Reasons of an Event.
const (
	ReasonInstall = "install"
	ReasonRemove  = "remove"
	ReasonReload  = "reload"
	// ReasonWrite: a SKILL.md was written by Write or Create.
	ReasonWrite = "write"
)

// Errors that end a Watch.
var (
	// ErrLagged: the watcher fell more than its backlog behind.
	ErrLagged = broadcast.ErrLagged
	// ErrClosed: the service closed.
	ErrClosed = broadcast.ErrClosed
)

// Event says that the set of skills, and so of skill commands, changed.
type Event struct {
	Reason string // ReasonInstall, ReasonRemove, ReasonReload or ReasonWrite
	Name   string // the skill installed or removed; "" for a reload
}

// Watch is a stream of Events.
type Watch = broadcast.Watch[Event]

// watchBacklog bounds a watcher's undelivered events: skill changes are
// rare, a watcher further behind re-reads the list.
const watchBacklog = 256
