package broadcast

import (
	"context"
	"sync"
)

// DefaultLimit is a Hub's limit when it sets none.
const DefaultLimit = 1024

// Hub fans values out to a set of watchers, each a DropSubscriber queue
// delivering on a channel: a watcher that falls more than Limit behind is
// ended (after what it was sent) and leaves the set. The zero value is
// ready, with DefaultLimit and no Lagged marker.
type Hub[T any] struct {
	// Limit bounds each watcher's undelivered values (0: DefaultLimit).
	Limit int
	// Lagged are delivered to a dropped watcher after its values.
	Lagged []T
	// OnDrop, if not nil, is called for each watcher dropped, with the
	// hub's lock held (to log it).
	OnDrop func()

	mu     sync.Mutex
	set    map[*Queue[T]]struct{}
	closed bool
}

// Watch is a watcher's read side of its queue: the values, and why they
// ended. Only the hub publishes to it.
type Watch[T any] struct{ q *Queue[T] }

// Events delivers the values in order; it is closed when the watch ends.
func (w *Watch[T]) Events() <-chan T { return w.q.Events() }

// Err tells why Events closed (see Hub.Add).
func (w *Watch[T]) Err() error { return w.q.Err() }

// Add opens a watch that ends with ctx (Err nil), with Close (ErrClosed)
// or when it falls behind (ErrLagged).
func (h *Hub[T]) Add(ctx context.Context) *Watch[T] {
	limit := h.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	q := New(Policy[T]{Limit: limit, Overflow: DropSubscriber, Lagged: h.Lagged})
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		q.End(ErrClosed)
		return &Watch[T]{q}
	}
	if h.set == nil {
		h.set = map[*Queue[T]]struct{}{}
	}
	h.set[q] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.set, q)
		h.mu.Unlock()
		q.Stop(nil)
	})
	return &Watch[T]{q}
}

// Publish offers v to every watcher without blocking: one whose limit is
// reached is dropped.
func (h *Hub[T]) Publish(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for q := range h.set {
		if q.Push(v) {
			delete(h.set, q)
			if h.OnDrop != nil {
				h.OnDrop()
			}
		}
	}
}

// Close ends every watcher with ErrClosed after what it was sent; later
// Adds end at once.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for q := range h.set {
		delete(h.set, q)
		q.End(ErrClosed)
	}
}

// Len counts the open watchers.
func (h *Hub[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.set)
}
