package eventlog

import (
	"context"
	"errors"
	"sync"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/telemetry"
)

// Cursor reads a session's events in seq order, each exactly once, without
// a goroutine of its own: the reader pulls with Visit when notify has told it
// there may be something to read. It is the one implementation of the
// delivery rules; Subscription is a Cursor read by a goroutine.
//
// Visit must not be called concurrently with itself; Close may be called at
// any time from any goroutine.
type Cursor struct {
	log    *Log
	s      *session
	notify func()
	sub    *Subscription // the subscription reading it, if any (Log.Close stops it)
	// storedOnly: the cursor returns only what the log holds, each event
	// in its stored form; a held event (Unstored) waits until it is stored
	// (a Subscription's: the runtime's own consumers act on the log).
	storedOnly bool

	mu       sync.Mutex
	buf      ring  // live events not yet read
	overflow bool  // a live event was dropped because buf was full
	wakeTo   int64 // Wake said the store holds events up to this seq
	closed   error // why the cursor ended (Close, Log.Close); Visit returns it
	closing  sync.Once
	// notice is a retraction notice (Log.Retract) to deliver next.
	notice []store.Event

	// The reader's state (Visit only).
	last      int64          // seq of the last event returned
	stored    int64          // seq of the last stored event returned (not unstored)
	readTo    int64          // read the store up to this seq before the buffer
	replaying bool           // CaughtUp is due once the replay up to readTo is read
	spill     []*store.Event // held events read beyond the last Visit's bounds, seq last+1...
	limit     int            // the last store page's limit (page sizing)
	err       error          // a store failure, returned once the events before it are read
}

// errCursorClosed is Visit's error after Close.
var errCursorClosed = errors.New("event log: cursor closed")

// ErrCursorClosed reports whether err is the error Visit returns after the
// cursor's own Close.
func ErrCursorClosed(err error) bool { return errors.Is(err, errCursorClosed) }

// Watch opens a cursor on the session's events with seq > afterSeq (a
// negative afterSeq: the last one stored when Watch was called): first
// those already stored when Watch was called, then (Visit's caughtUp) the
// end of the replay, then new events as they are committed, read with no
// gap and no duplicate. notify is called, without blocking and from the
// log's goroutines (the writer, Wake, Close), whenever Visit may have
// something new to return; it must not block nor call the cursor. Watch
// does not check that the session exists: an unknown session replays
// nothing. Close the cursor when done.
func (l *Log) Watch(ctx context.Context, sessionID string, afterSeq int64, notify func()) (*Cursor, error) {
	return l.watch(ctx, sessionID, afterSeq, notify, nil)
}

func (l *Log) watch(ctx context.Context, sessionID string, afterSeq int64, notify func(), sub *Subscription) (*Cursor, error) {
	if sessionID == "" {
		return nil, errs.New(errcode.InvalidParams, "event log: subscribe needs a session id")
	}
	if notify == nil {
		notify = func() {}
	}
	c := &Cursor{log: l, notify: notify, sub: sub, storedOnly: sub != nil, buf: newRing(l.cfg.subscriberBuffer), last: afterSeq, stored: afterSeq, replaying: true}
	// Register before reading the store: every event committed from now on
	// reaches the buffer, every earlier one is in the store.
	l.mu.Lock()
	if l.subsClosed {
		l.mu.Unlock()
		return nil, errShutdown()
	}
	s := l.sessionLocked(sessionID)
	c.s = s
	s.subMu.Lock()
	s.subs[c] = struct{}{}
	s.subMu.Unlock()
	l.mu.Unlock()
	telemetry.SubscriptionOpened() // Close closes it

	// The replay covers at least what is stored now; later events come
	// through the buffer (or, if it overflows, the store again).
	target, err := l.lastStored(ctx, s)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.readTo = target
	if afterSeq < 0 {
		c.last, c.stored = target, target
	}
	return c, nil
}

// Close ends the cursor: no more live events reach it and Visit returns an
// error (ErrCursorClosed). It is safe to call more than once.
func (c *Cursor) Close() { c.end(errCursorClosed) }

// end unregisters the cursor and records why it ended (first cause wins).
func (c *Cursor) end(cause error) {
	c.closing.Do(func() {
		c.s.subMu.Lock()
		delete(c.s.subs, c)
		c.s.subMu.Unlock()
		c.mu.Lock()
		c.closed = cause
		c.buf = ring{}
		c.mu.Unlock()
		telemetry.SubscriptionClosed()
		c.notify()
	})
}

// SessionID is the session the cursor reads.
func (c *Cursor) SessionID() string { return c.s.id }

// Last is the seq of the last event Visit returned (afterSeq before any).
// Reader only, like Visit.
func (c *Cursor) Last() int64 { return c.last }

// push offers a committed event; it never blocks. It is called by the
// writer goroutine in seq order.
func (c *Cursor) push(ev *store.Event) {
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return
	}
	if !c.buf.push(ev) {
		if !c.overflow {
			telemetry.SlowSubscriber()
		}
		c.overflow = true
	}
	c.mu.Unlock()
	c.notify()
}

// retract queues a retraction notice (Log.Retract): the next read
// delivers it and goes back to the last stored event it returned.
func (c *Cursor) retract(notice []store.Event) {
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return
	}
	c.notice = notice
	c.mu.Unlock()
	c.notify()
}

// wake records that the store holds events up to seq (Log.Wake).
func (c *Cursor) wake(seq int64) {
	c.mu.Lock()
	if seq > c.wakeTo {
		c.wakeTo = seq
	}
	c.mu.Unlock()
	c.notify()
}

// Overhead is what Visit counts for an event besides its payload bytes
// against maxBytes: about the size of its envelope once rendered.
const Overhead = 128

// MaxEventBytes is the largest event (payload plus Overhead) a cursor
// delivers: past it no gRPC message can carry it, and reading it is a
// payload_too_large error naming the limit, not a page that never fits.
const MaxEventBytes = 64 << 20

// Behind reports whether the replay has events left to read: more stored
// events than the last Visit's bounds took.
func (c *Cursor) Behind() bool { return len(c.spill) > 0 || c.last < c.readTo }

// Visit hands the next events in seq order to visit, at most maxEvents
// (<= 0: the log's replay page) and, past the first, at most maxBytes
// (payload plus Overhead each; <= 0: no bound); caughtUp is true once,
// after the last event of the replay (the events visited with it
// included). Nothing to read now is (0, false, nil): wait for notify and
// call again. The event handed to visit, and its Payload, may point into
// the store's buffers: valid only during the call, and the store read may
// be open meanwhile, so visit copies what it keeps and does not block. An
// error of visit stops the read and is returned (that event counts as
// read). An error ends the cursor (after the events read before it were
// visited): ctx's error, the store's failure, ErrClosed when the log
// closed, ErrCursorClosed, or payload_too_large for an event over
// MaxEventBytes.
//
// The store is read from the last returned event up to the replay target,
// then the buffered live events are returned; a live event at or below the
// last returned seq was already read from the store and is skipped, one
// beyond the next seq reveals dropped events, which are committed and so
// are read from the store; a full buffer (overflow) or a Wake reads the
// store up to the committed (or woken) seq.
func (c *Cursor) Visit(ctx context.Context, maxEvents, maxBytes int, visit func(*store.Event) error) (n int, caughtUp bool, err error) {
	if maxEvents <= 0 {
		maxEvents = c.log.cfg.replayPage
	}
	var size int
	// room says whether one more event of p payload bytes fits.
	room := func(p int) bool {
		return n < maxEvents && (n == 0 || maxBytes <= 0 || size+p+Overhead <= maxBytes)
	}
	take := func(ev *store.Event) error {
		if ev.Unstored && c.storedOnly {
			// Its stored form comes when the store takes it (or the
			// retraction when this daemon never will): the cursor stays
			// before it, and a held event after it is a gap to read from
			// the store.
			return nil
		}
		if sz := len(ev.Payload) + Overhead; sz > MaxEventBytes {
			return tooLarge(ev, sz)
		}
		n, size, c.last = n+1, size+len(ev.Payload)+Overhead, ev.Seq
		if !ev.Unstored {
			c.stored = ev.Seq
		}
		return visit(ev)
	}
	for {
		c.mu.Lock()
		closed, notice := c.closed, c.notice
		if notice != nil {
			// What the cursor had from memory is void, and what it had
			// buffered is read from the store again.
			c.notice, c.buf, c.overflow = nil, newRing(c.log.cfg.subscriberBuffer), false
		}
		c.mu.Unlock()
		if closed != nil {
			return n, false, closed
		}
		if notice != nil {
			return c.deliverNotice(n, notice, visit)
		}
		// Events read from the store beyond the bounds of the last call.
		for len(c.spill) > 0 && room(len(c.spill[0].Payload)) {
			ev := c.spill[0]
			c.spill[0] = nil
			c.spill = c.spill[1:]
			if err := take(ev); err != nil {
				return n, false, err
			}
		}
		if len(c.spill) > 0 {
			return n, false, nil
		}
		c.spill = nil
		if c.err != nil {
			if n > 0 {
				return n, false, nil
			}
			return 0, false, c.err
		}
		if n >= maxEvents || (maxBytes > 0 && size >= maxBytes) {
			return n, false, nil
		}
		if c.last < c.readTo {
			got, full, stop, err := c.readStore(ctx, maxEvents-n, maxBytes-size, maxBytes > 0, room, take)
			if stop != nil {
				return n, false, stop
			}
			if full {
				return n, false, nil
			}
			if err != nil {
				if ctx.Err() != nil {
					return n, false, ctx.Err()
				}
				c.err = err
				continue
			}
			if got == 0 {
				// The store has fewer events than readTo (the rest may
				// come from the held events, or never were): stop there.
				c.readHeld()
				c.readTo = c.last
			}
			continue
		}
		if c.replaying {
			c.replaying = false
			return n, true, nil
		}
		c.mu.Lock()
		if c.buf.len() == 0 {
			if !c.overflow && c.wakeTo <= c.last {
				c.mu.Unlock()
				return n, false, nil
			}
			// Events were dropped after the buffered ones (they are all
			// committed, so reading up to the committed seq finds them), or
			// Wake reported events another writer committed.
			c.overflow = false
			c.readTo = max(c.s.committed.Load(), c.wakeTo)
			c.mu.Unlock()
			continue
		}
		ev := c.buf.peek()
		switch {
		case ev.Seq <= c.last:
			// Already read from the store.
			c.buf.pop()
			c.mu.Unlock()
		case ev.Seq == c.last+1:
			if !room(len(ev.Payload)) {
				c.mu.Unlock()
				return n, false, nil
			}
			c.buf.pop()
			c.mu.Unlock()
			if err := take(ev); err != nil {
				return n, false, err
			}
		default:
			// A gap: the events before it were dropped; read them (and it)
			// from the store.
			c.buf.pop()
			c.readTo = ev.Seq
			c.mu.Unlock()
		}
	}
}

// deliverNotice hands a retraction notice to visit, each of its events
// under the seq after the last stored event the cursor returned, and then
// goes back to that event: what the cursor returned from memory after it
// is void, and the events the store holds from that seq on (the new
// owner's) follow when a Wake says they are there. n events were visited
// before it in this read.
func (c *Cursor) deliverNotice(n int, notice []store.Event, visit func(*store.Event) error) (int, bool, error) {
	from := c.stored + 1
	c.spill = nil
	for i := range notice {
		ev := notice[i]
		ev.SessionID, ev.Seq = c.s.id, from
		n++
		if err := visit(&ev); err != nil {
			return n, false, err
		}
	}
	c.last = from - 1
	// Read again what is stored beyond (the buffer was dropped); anything
	// later comes with a Wake. A target past the store's end reads what is
	// there, and no held event: this daemon no longer owns the session.
	c.readTo = max(c.readTo, c.last)
	if c.s.known.Load() {
		c.readTo = max(c.readTo, c.s.committed.Load())
	}
	return n, false, nil
}

// tooLarge is the error of an event no message can carry.
func tooLarge(e *store.Event, size int) error {
	return errs.New(errcode.PayloadTooLarge, "event %d of session %s (%s) is %d bytes, over the limit of %d bytes for one message; read the events after it (afterSeq %d)",
		e.Seq, e.SessionID, e.Kind, size, MaxEventBytes, e.Seq).
		WithData("limit", int64(MaxEventBytes)).WithData("size", int64(size))
}

// errStop ends a store read early (its cause is in the caller's hands).
var errStop = errors.New("event log: stop")

// readStore reads one page of the stored events in (last, readTo]: each
// is taken (visited) while it fits; the read stops at the first that does
// not (full), which the next read starts from (the rows not read cost
// nothing). It returns how many rows it read and, apart, an error of take.
// The page's limit starts at 512 events and at most doubles from one read
// to the next, up to the log's replay page, and no more events than
// wantBytes can hold (with bounded): the first events of a long replay go
// out after a short read, a long one takes few queries, and a bounded
// answer (ResumeSession's) one query.
func (c *Cursor) readStore(ctx context.Context, wantEvents, wantBytes int, bounded bool, room func(int) bool, take func(*store.Event) error) (got int, full bool, stop, err error) {
	c.limit = min(max(2*c.limit, 512), c.log.cfg.replayPage)
	limit := int(min(int64(c.limit), c.readTo-c.last))
	limit = max(min(limit, wantEvents), 1)
	if bounded {
		limit = max(min(limit, wantBytes/Overhead+1), 1)
	}
	one := func(ev *store.Event) error {
		got++
		if !room(len(ev.Payload)) {
			// One that can never fit ends the read with its error, so
			// that the answer says so rather than leaving it to a
			// later read.
			if sz := len(ev.Payload) + Overhead; sz > MaxEventBytes {
				stop = tooLarge(ev, sz)
				return errStop
			}
			full = true
			return errStop
		}
		if stop = take(ev); stop != nil {
			return errStop
		}
		return nil
	}
	// Rows straight from the driver's buffers: no value per row.
	e := store.Event{SessionID: c.s.id}
	err = c.log.st.ScanEvents(ctx, c.s.id, c.last, limit, func(r *store.EventRow) error {
		if string(r.Kind) != e.Kind {
			e.Kind = string(r.Kind) // rows of one kind share the string
		}
		e.Seq, e.TS, e.Payload = r.Seq, r.TS, r.Payload
		return one(&e)
	})
	if stop != nil {
		return got, false, stop, nil
	}
	if full {
		return got, true, nil, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return got, false, nil, ctx.Err()
		}
		telemetry.StoreError("read_events")
		return got, false, nil, errs.Wrap(errcode.Internal, err, "event log: cannot read the stored events of session %s", c.s.id)
	}
	return got, false, nil, nil
}

// readHeld puts into the spill the session's held events in (last,
// readTo] that follow last without a gap.
func (c *Cursor) readHeld() {
	if c.storedOnly || !c.log.owned(c.s) {
		return // not for this cursor, or never to be stored by this daemon
	}
	c.s.heldMu.Lock()
	var evs []*store.Event
	for i := range c.s.heldEvs {
		if ev := &c.s.heldEvs[i]; ev.Seq > c.last && ev.Seq <= c.readTo {
			cp := *ev
			evs = append(evs, &cp)
		}
	}
	c.s.heldMu.Unlock()
	next := c.last + 1
	for _, ev := range evs {
		if ev.Seq != next {
			break
		}
		c.spill = append(c.spill, ev)
		next++
	}
}

// ring is a FIFO of events that grows up to a maximum size.
type ring struct {
	items   []*store.Event
	head, n int
	max     int
}

func newRing(size int) ring { return ring{max: size} }

func (r *ring) len() int { return r.n }

func (r *ring) push(ev *store.Event) bool {
	if r.n == len(r.items) {
		if r.n >= r.max {
			return false
		}
		grown := make([]*store.Event, min(max(2*len(r.items), 8), r.max))
		for i := 0; i < r.n; i++ {
			grown[i] = r.items[(r.head+i)%len(r.items)]
		}
		r.items, r.head = grown, 0
	}
	r.items[(r.head+r.n)%len(r.items)] = ev
	r.n++
	return true
}

func (r *ring) peek() *store.Event { return r.items[r.head] }

func (r *ring) pop() *store.Event {
	ev := r.items[r.head]
	r.items[r.head] = nil
	r.head = (r.head + 1) % len(r.items)
	r.n--
	return ev
}
