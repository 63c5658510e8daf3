package eventlog

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/trellis-run/trellis/runtime/store"
)

// Item is one delivery of a subscription: an event, or (once, after the
// replay) the CaughtUp marker with a nil Event.
type Item struct {
	Event    *store.Event // the subscription's own copy
	CaughtUp bool
}

// Subscription delivers a session's events in seq order, each exactly once,
// on a channel: a Cursor read by a goroutine of its own. It is for the
// runtime's own consumers (jobs, agents, gateways), which act on what the
// log holds and nothing else: it delivers stored events only. An event the
// store could not take yet (held, sent to clients from memory as Unstored)
// reaches a subscription once it is stored, and an event this daemon never
// stores (its lease lost) never does; a retraction notice (Retract) is left
// out too: what follows it is what the log holds.
type Subscription struct {
	cur       *Cursor
	out       chan Item
	ctx       context.Context
	cancel    context.CancelCauseFunc
	done      chan struct{} // the pump has exited and out is closed
	closeOnce sync.Once
	signal    chan struct{} // the cursor's notify

	mu  sync.Mutex
	err error // why the pump stopped
}

// errUnsubscribed is the cancel cause of Subscription.Close.
var errUnsubscribed = errors.New("subscription closed")

// Subscribe delivers the session's events with seq > afterSeq (a negative
// afterSeq: the last one stored when Subscribe was called): first those
// already stored when Subscribe was called, then an Item with CaughtUp set,
// then new events as they are committed. Nothing is skipped or repeated.
// The subscription ends, and its channel closes, when ctx ends, when Close
// is called or when the log closes. Subscribe does not check that the
// session exists: an unknown session replays nothing.
func (l *Log) Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*Subscription, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	sub := &Subscription{
		out:    make(chan Item),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		signal: make(chan struct{}, 1),
	}
	notify := func() {
		select {
		case sub.signal <- struct{}{}:
		default:
		}
	}
	cur, err := l.watch(ctx, sessionID, afterSeq, notify, sub)
	if err != nil {
		cancel(err)
		return nil, err
	}
	sub.cur = cur
	go sub.run()
	return sub, nil
}

// Items returns the delivery channel; it is closed when the subscription ends.
func (sub *Subscription) Items() <-chan Item { return sub.out }

// Close ends the subscription and waits until its goroutine has exited.
// It is safe to call more than once and from any goroutine.
func (sub *Subscription) Close() {
	sub.stop(errUnsubscribed)
}

func (sub *Subscription) stop(cause error) {
	sub.closeOnce.Do(func() { sub.cancel(cause) })
	<-sub.done
}

// Err tells why the channel closed: nil after Close, an error wrapping
// ErrClosed (code overloaded) when the log closed, the context's error when
// ctx ended, or the store failure that stopped it. It is set before the channel closes and is nil until then.
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// run is the subscription's goroutine: it reads the cursor whenever it
// may have something and hands each item over.
func (sub *Subscription) run() {
	sub.finish(sub.pump())
}

func (sub *Subscription) pump() error {
	ctx := sub.ctx
	for {
		// A lease_lost notice is for clients: the runtime's own consumers
		// (jobs, agents, gateways) act only on what the log holds, and the
		// new owner's events follow from it. The events are copied: a
		// cursor's may point into the store's buffers.
		var evs []*store.Event
		n, caughtUp, err := sub.cur.Visit(ctx, 0, 0, func(ev *store.Event) error {
			if !ev.Retracted {
				cp := *ev
				cp.Payload = append([]byte(nil), ev.Payload...)
				evs = append(evs, &cp)
			}
			return nil
		})
		for _, ev := range evs {
			if !sub.send(Item{Event: ev}) {
				return ctx.Err()
			}
		}
		if err != nil {
			return err
		}
		if caughtUp && !sub.send(Item{CaughtUp: true}) {
			return ctx.Err()
		}
		if n > 0 || caughtUp {
			continue
		}
		select {
		case <-sub.signal:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finish closes the cursor, records why the subscription ended and closes
// its channel.
func (sub *Subscription) finish(err error) {
	sub.cur.Close()
	if cause := context.Cause(sub.ctx); cause != nil && (err == nil || errors.Is(err, sub.ctx.Err())) {
		err = cause
	}
	if errors.Is(err, errUnsubscribed) || ErrCursorClosed(err) {
		err = nil
	}
	sub.cancel(err)
	sub.mu.Lock()
	sub.err = err
	sub.mu.Unlock()
	close(sub.out)
	close(sub.done)
}

func (sub *Subscription) send(it Item) bool {
	select {
	case sub.out <- it:
		return true
	case <-sub.ctx.Done():
		return false
	}
}

// fanOut offers a committed event to the session's cursors.
func (s *session) fanOut(ev *store.Event) {
	s.subMu.Lock()
	for c := range s.subs {
		c.push(ev)
	}
	s.subMu.Unlock()
}

// Wake tells the log that the store holds the session's events up to seq,
// committed by a writer the log does not see (another daemon): each of the
// session's subscriptions and cursors reads the store from its last
// delivered event up to seq. The notification carries no payload: readers
// always fetch from the store, so a duplicate or late Wake is harmless and a
// lost one is covered by the next.
//
// A Wake of a session this log writes (it holds the lease and has counted
// the session's events since it took it) is the echo of its own commit and
// is ignored: the writer hands each commit to the cursors itself, after it
// counted it, so no cursor returns an event that the count (a resume's
// target) does not include yet. The echo can arrive first: the store
// notifies on commit, before the writer has published it.
func (l *Log) Wake(sessionID string, seq int64) {
	if l.writes(sessionID) {
		return
	}
	for _, c := range l.cursors(sessionID) {
		c.wake(seq)
	}
}

// writes reports whether this log writes the session's events: it holds
// the lease and its count of them is loaded (since it took the lease, see
// Reload).
func (l *Log) writes(sessionID string) bool {
	l.mu.Lock()
	s := l.sessions[sessionID]
	l.mu.Unlock()
	return s != nil && s.known.Load() && l.owned(s)
}

// cursors returns the session's open cursors (none when the log keeps no
// state for it), to be told something outside the session's locks.
func (l *Log) cursors(sessionID string) []*Cursor {
	l.mu.Lock()
	s := l.sessions[sessionID]
	l.mu.Unlock()
	if s == nil {
		return nil
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	return slices.Collect(maps.Keys(s.subs))
}
