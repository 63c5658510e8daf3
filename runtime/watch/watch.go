// Package watch fans events out to watchers without ever blocking the
// publisher: each watcher has a bounded backlog, and one that falls further
// behind is ended with ErrLagged (it can watch again and re-read the state).
// The job, gateway and skill services use it for their Watch streams.
package watch

import (
	"context"
	"errors"
	"sync"
)

// DefaultBacklog is a watcher's backlog when the Hub sets none.
const DefaultBacklog = 1024

var (
	// ErrLagged ends a watcher that fell more than its backlog behind.
	ErrLagged = errors.New("the watcher fell behind and was dropped; watch again")
	// ErrClosed ends every watcher when the hub closes.
	ErrClosed = errors.New("the service stopped")
)

// Watch is one watcher's stream of events.
type Watch[T any] struct {
	ch chan T

	mu     sync.Mutex
	closed bool
	err    error
}

// Events delivers the events; it is closed when the watch ends.
func (w *Watch[T]) Events() <-chan T { return w.ch }

// Err tells why Events closed: nil when its context ended, ErrLagged when
// the watcher fell too far behind, ErrClosed when the hub closed.
func (w *Watch[T]) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// end closes the channel once; the caller holds the hub's lock, which also
// guards every send.
func (w *Watch[T]) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed, w.err = true, err
	close(w.ch)
}

// Hub fans events out to the open watches. The zero value is ready, with
// DefaultBacklog.
type Hub[T any] struct {
	// Backlog bounds each watcher's undelivered events (0 = DefaultBacklog).
	Backlog int

	mu     sync.Mutex
	set    map[*Watch[T]]struct{}
	closed bool
}

// Add opens a watch that ends with ctx.
func (h *Hub[T]) Add(ctx context.Context) *Watch[T] {
	backlog := h.Backlog
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	w := &Watch[T]{ch: make(chan T, backlog)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		w.end(ErrClosed)
		return w
	}
	if h.set == nil {
		h.set = map[*Watch[T]]struct{}{}
	}
	h.set[w] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.set, w)
		w.end(nil)
	})
	return w
}

// Publish offers ev to every watch without blocking: a watch whose backlog
// is full is ended with ErrLagged.
func (h *Hub[T]) Publish(ev T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.set {
		select {
		case w.ch <- ev:
		default:
			delete(h.set, w)
			w.end(ErrLagged)
		}
	}
}

// Close ends every watch with ErrClosed; later Adds end at once.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for w := range h.set {
		delete(h.set, w)
		w.end(ErrClosed)
	}
}
