package skill

import (
	"context"
	"errors"
	"sync"
)

// Reasons of an Event.
const (
	ReasonInstall = "install"
	ReasonRemove  = "remove"
	ReasonReload  = "reload"
)

// Errors that end a Watch.
var (
	// ErrLagged: the watcher fell more than watchBacklog events behind.
	ErrLagged = errors.New("skill watcher fell behind")
	// ErrClosed: the service closed.
	ErrClosed = errors.New("skill service closed")
)

// watchBacklog bounds a watcher's undelivered events.
const watchBacklog = 256

// Event says that the set of skills, and so of skill commands, changed.
type Event struct {
	Reason string // ReasonInstall, ReasonRemove or ReasonReload
	Name   string // the skill installed or removed; "" for a reload
}

// Watch is a stream of Events.
type Watch struct {
	ch chan Event

	mu     sync.Mutex
	closed bool
	err    error
}

// Events delivers the events; it is closed when the watch ends.
func (w *Watch) Events() <-chan Event { return w.ch }

// Err tells why Events closed: nil when its context ended, ErrLagged or
// ErrClosed.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// end closes the channel once; the caller holds watchers.mu, which also
// guards every send.
func (w *Watch) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed, w.err = true, err
	close(w.ch)
}

// watchers fans events out to the open watches.
type watchers struct {
	mu     sync.Mutex
	set    map[*Watch]struct{}
	closed bool
}

func (ws *watchers) add(ctx context.Context) *Watch {
	w := &Watch{ch: make(chan Event, watchBacklog)}
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		w.end(ErrClosed)
		return w
	}
	if ws.set == nil {
		ws.set = map[*Watch]struct{}{}
	}
	ws.set[w] = struct{}{}
	ws.mu.Unlock()
	context.AfterFunc(ctx, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		delete(ws.set, w)
		w.end(nil)
	})
	return w
}

// publish offers ev to every watch without blocking; a watch whose backlog
// is full is ended with ErrLagged.
func (ws *watchers) publish(ev Event) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.set {
		select {
		case w.ch <- ev:
		default:
			delete(ws.set, w)
			w.end(ErrLagged)
		}
	}
}

func (ws *watchers) close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	for w := range ws.set {
		delete(ws.set, w)
		w.end(ErrClosed)
	}
}
