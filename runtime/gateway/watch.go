package gateway

import (
	"context"
	"sync"
)

// Kinds of gateway.event.
const (
	EventMessage = "message"
	EventReply   = "reply"
	EventError   = "error"
)

// watchBacklog bounds a watcher's undelivered events.
const watchBacklog = 1024

// Event is one gateway.event notification.
type Event struct {
	BindingID string
	Kind      string // EventMessage, EventReply or EventError
	Payload   map[string]any
}

// Watch is a stream of gateway events (GatewayService.Watch).
type Watch struct {
	ch chan Event

	mu     sync.Mutex
	closed bool
	err    error
}

// Events delivers the events; it is closed when the watch ends.
func (w *Watch) Events() <-chan Event { return w.ch }

// Err tells why Events closed: nil when its context ended, ErrLagged when
// the watcher fell too far behind, ErrClosed when the service stopped.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

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

// publish offers ev to every watch without blocking: a watch whose backlog
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
