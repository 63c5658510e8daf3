package eventlog

import (
	"context"
	"errors"
	"sync"

	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/telemetry"
)

// Item is one delivery of a subscription: an event, or (once, after the
// replay) the CaughtUp marker with a nil Event.
type Item struct {
	Event    *store.Event // shared with other subscribers: do not modify
	CaughtUp bool
}

// Subscription delivers a session's events in seq order, each exactly once.
type Subscription struct {
	log       *Log
	s         *session
	out       chan Item
	ctx       context.Context
	cancel    context.CancelCauseFunc
	done      chan struct{} // the pump has exited and out is closed
	closeOnce sync.Once

	mu       sync.Mutex
	buf      ring  // live events not yet taken by the pump
	overflow bool  // a live event was dropped because buf was full
	wakeTo   int64 // Wake said the store holds events up to this seq
	signal   chan struct{}
	err      error // why the pump stopped
}

// errUnsubscribed is the cancel cause of Subscription.Close.
var errUnsubscribed = errors.New("subscription closed")

// Subscribe delivers the session's events with seq > afterSeq: first those
// already stored when Subscribe was called, then an Item with CaughtUp set,
// then new events as they are committed. Nothing is skipped or repeated.
// The subscription ends, and its channel closes, when ctx ends, when Close
// is called or when the log closes. Subscribe does not check that the
// session exists: an unknown session replays nothing.
func (l *Log) Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*Subscription, error) {
	if sessionID == "" || afterSeq < 0 {
		return nil, errs.New(errs.InvalidParams, "event log: subscribe needs a session id and afterSeq >= 0 (got %q, %d)", sessionID, afterSeq)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	sub := &Subscription{
		log:    l,
		out:    make(chan Item),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		buf:    newRing(l.cfg.subscriberBuffer),
		signal: make(chan struct{}, 1),
	}
	// Register before reading the store: every event committed from now on
	// reaches the buffer, every earlier one is in the store.
	l.mu.Lock()
	if l.subsClosed {
		l.mu.Unlock()
		cancel(ErrClosed)
		return nil, errs.Wrap(errs.Internal, ErrClosed, "event log: closed, the daemon is shutting down")
	}
	s := l.sessions[sessionID]
	if s == nil {
		s = &session{id: sessionID, subs: make(map[*Subscription]struct{})}
		l.sessions[sessionID] = s
	}
	sub.s = s
	s.subMu.Lock()
	s.subs[sub] = struct{}{}
	s.subMu.Unlock()
	l.mu.Unlock()
	telemetry.SubscriptionOpened() // finish closes it, whatever happens next

	// The replay covers at least what is stored now; later events come
	// through the buffer (or, if it overflows, the store again).
	target, err := l.st.LastSeq(ctx, sessionID)
	if err != nil {
		err = errs.Wrap(errs.Internal, err, "event log: cannot read the stored events of session %s", sessionID)
		sub.finish(err) // Log.Close may already be waiting for it
		return nil, err
	}
	go sub.run(afterSeq, target)
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

// Err tells why the channel closed: nil after Close, ErrClosed when the log
// closed, the context's error when ctx ended, or the store failure that
// stopped it. It is set before the channel closes and is nil until then.
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// push offers a committed event; it never blocks. It is called by the
// writer goroutine in seq order.
func (sub *Subscription) push(ev *store.Event) {
	sub.mu.Lock()
	if !sub.buf.push(ev) {
		if !sub.overflow {
			telemetry.SlowSubscriber()
		}
		sub.overflow = true
	}
	sub.mu.Unlock()
	select {
	case sub.signal <- struct{}{}:
	default:
	}
}

// fanOut offers a committed event to the session's subscribers.
func (s *session) fanOut(ev *store.Event) {
	s.subMu.Lock()
	for sub := range s.subs {
		sub.push(ev)
	}
	s.subMu.Unlock()
}

// Wake tells the log that the store holds the session's events up to seq,
// committed by a writer the log does not see (another daemon): each of the
// session's subscriptions reads the store from its last delivered event up
// to seq. The notification carries no payload: readers always fetch from
// the store, so a duplicate or late Wake is harmless and a lost one is
// covered by the next.
func (l *Log) Wake(sessionID string, seq int64) {
	l.mu.Lock()
	s := l.sessions[sessionID]
	l.mu.Unlock()
	if s == nil {
		return
	}
	s.subMu.Lock()
	for sub := range s.subs {
		sub.mu.Lock()
		if seq > sub.wakeTo {
			sub.wakeTo = seq
		}
		sub.mu.Unlock()
		select {
		case sub.signal <- struct{}{}:
		default:
		}
	}
	s.subMu.Unlock()
}

// run is the subscription's goroutine.
func (sub *Subscription) run(afterSeq, target int64) {
	sub.finish(sub.pump(afterSeq, target))
}

// finish unregisters sub, records why it ended and closes its channel.
func (sub *Subscription) finish(err error) {
	sub.unregister()
	telemetry.SubscriptionClosed()
	if cause := context.Cause(sub.ctx); cause != nil && (err == nil || errors.Is(err, sub.ctx.Err())) {
		err = cause
	}
	if errors.Is(err, errUnsubscribed) {
		err = nil
	}
	sub.cancel(err)
	sub.mu.Lock()
	sub.err = err
	sub.buf = ring{}
	sub.mu.Unlock()
	close(sub.out)
	close(sub.done)
}

// unregister stops live deliveries to sub.
func (sub *Subscription) unregister() {
	sub.s.subMu.Lock()
	delete(sub.s.subs, sub)
	sub.s.subMu.Unlock()
}

// pump delivers the replay up to target, CaughtUp, then live events, falling
// back to the store whenever live events were dropped. last is the seq of
// the last delivered event: a live event at or below it was already read
// from the store and is skipped, one beyond last+1 reveals dropped events,
// which are committed and so are read from the store.
func (sub *Subscription) pump(afterSeq, target int64) error {
	ctx := sub.ctx
	last, err := sub.readStore(afterSeq, target)
	if err != nil {
		return err
	}
	if !sub.send(Item{CaughtUp: true}) {
		return ctx.Err()
	}
	for {
		sub.mu.Lock()
		for sub.buf.len() == 0 && !sub.overflow && sub.wakeTo <= last {
			sub.mu.Unlock()
			select {
			case <-sub.signal:
			case <-ctx.Done():
				return ctx.Err()
			}
			sub.mu.Lock()
		}
		if sub.buf.len() == 0 {
			// Events were dropped after the buffered ones (they are all
			// committed, so reading up to the committed seq finds them), or
			// Wake reported events another writer committed.
			sub.overflow = false
			target := max(sub.s.committed.Load(), sub.wakeTo)
			sub.mu.Unlock()
			if last, err = sub.readStore(last, target); err != nil {
				return err
			}
			continue
		}
		ev := sub.buf.pop()
		sub.mu.Unlock()
		switch {
		case ev.Seq <= last:
			// Already delivered from the store.
		case ev.Seq == last+1:
			if !sub.send(Item{Event: ev}) {
				return ctx.Err()
			}
			last = ev.Seq
		default:
			if last, err = sub.readStore(last, ev.Seq); err != nil {
				return err
			}
		}
	}
}

// readStore delivers the stored events in (last, target] and returns the
// new last (short of target only if the store has fewer events).
func (sub *Subscription) readStore(last, target int64) (int64, error) {
	for last < target {
		limit := int(min(int64(sub.log.cfg.replayPage), target-last))
		page, err := sub.log.st.ReadEvents(sub.ctx, sub.s.id, last, limit)
		if err != nil {
			return last, sub.storeErr(err)
		}
		if len(page) == 0 {
			// The rest may be held in memory (the store could not take it).
			return sub.readHeld(last, target)
		}
		for i := range page {
			if !sub.send(Item{Event: &page[i]}) {
				return last, sub.ctx.Err()
			}
			last = page[i].Seq
		}
	}
	return last, nil
}

// readHeld delivers the session's held events in (last, target], the ones
// that follow last without a gap, and returns the new last.
func (sub *Subscription) readHeld(last, target int64) (int64, error) {
	sub.s.heldMu.Lock()
	var evs []*store.Event
	for i := range sub.s.heldEvs {
		if ev := &sub.s.heldEvs[i]; ev.Seq > last && ev.Seq <= target {
			cp := *ev
			evs = append(evs, &cp)
		}
	}
	sub.s.heldMu.Unlock()
	for _, ev := range evs {
		if ev.Seq != last+1 {
			break
		}
		if !sub.send(Item{Event: ev}) {
			return last, sub.ctx.Err()
		}
		last = ev.Seq
	}
	return last, nil
}

func (sub *Subscription) storeErr(err error) error {
	if sub.ctx.Err() != nil {
		return sub.ctx.Err()
	}
	telemetry.StoreError("read_events")
	return errs.Wrap(errs.Internal, err, "event log: cannot read the stored events of session %s", sub.s.id)
}

func (sub *Subscription) send(it Item) bool {
	select {
	case sub.out <- it:
		return true
	case <-sub.ctx.Done():
		return false
	}
}

// ring is a fixed-size FIFO of events.
type ring struct {
	items   []*store.Event
	head, n int
}

func newRing(size int) ring { return ring{items: make([]*store.Event, size)} }

func (r *ring) len() int { return r.n }

func (r *ring) push(ev *store.Event) bool {
	if r.n == len(r.items) {
		return false
	}
	r.items[(r.head+r.n)%len(r.items)] = ev
	r.n++
	return true
}

func (r *ring) pop() *store.Event {
	ev := r.items[r.head]
	r.items[r.head] = nil
	r.head = (r.head + 1) % len(r.items)
	r.n--
	return ev
}
