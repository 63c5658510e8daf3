package cluster

import (
	"context"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// Waker is the part of runtime/eventlog that local event tails are woken
// through.
type Waker interface {
	// Wake says the store holds the session's events up to seq.
	Wake(sessionID string, seq int64)
	// Watched lists the sessions with a local subscription.
	Watched() []string
}

// DefaultPoll is how often the safety net looks at the sessions watched
// here and owned elsewhere, in case a notification was lost.
const DefaultPoll = time.Second

// Tail wakes this daemon's event tails when another daemon commits events:
// from the store's notifications (PostgreSQL LISTEN/NOTIFY) when it has
// them, and from a slow poll of the watched sessions this daemon does not
// own. It returns when ctx ends.
func (n *Node) Tail(ctx context.Context, w Waker, every time.Duration) {
	if every <= 0 {
		every = DefaultPoll
	}
	pollNow := make(chan struct{}, 1)
	if notifier, ok := n.opts.Store.(store.EventNotifier); ok {
		go func() {
			_ = notifier.ListenEvents(ctx, func(sessionID string, seq int64) {
				if sessionID == "" {
					select {
					case pollNow <- struct{}{}:
					default:
					}
					return
				}
				w.Wake(sessionID, seq)
			})
		}()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-pollNow:
		}
		n.poll(ctx, w)
	}
}

// poll wakes the watched sessions owned elsewhere with their stored last seq.
func (n *Node) poll(ctx context.Context, w Waker) {
	for _, id := range w.Watched() {
		if n.Holds(id) {
			continue // this daemon writes it: its tails see every commit
		}
		last, err := n.opts.Store.LastSeq(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				n.opts.Log.Warn("poll the events of a watched session", "sessionId", id, "err", err)
			}
			continue
		}
		if last > 0 {
			w.Wake(id, last)
		}
	}
}
