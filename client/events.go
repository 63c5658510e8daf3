package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Event is one session event (PROTOCOL.md §7), the params of a session.event
// notification.
type Event struct {
	SessionID string          `json:"sessionId"`
	Seq       int64           `json:"seq"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload"`
	TS        string          `json:"ts"`
	// Unstored is set on an event sent from memory because the store could
	// not take it yet: it is stored later under the same seq, unless a
	// retracted notice from that seq or before voids it.
	Unstored bool `json:"unstored,omitempty"`
	// Retracted is set on the lease_lost notice of a daemon that lost the
	// session (error{lease_lost}, then turn.done{error}): never stored, it
	// voids every event received Unstored from its seq on, and the stream
	// goes on from that seq with what the log holds (the new owner's
	// events), which the stream delivers next.
	Retracted bool `json:"retracted,omitempty"`
	// Raw is the event object as the daemon sent it, compacted to one line.
	Raw json.RawMessage `json:"-"`
}

// decodeEvent decodes a session.event object and keeps its bytes.
func decodeEvent(raw []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return ev, err
	}
	if ev.SessionID == "" || ev.Seq <= 0 || ev.Kind == "" {
		return ev, fmt.Errorf("event without sessionId, seq or kind: %.200s", raw)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return ev, err
	}
	ev.Raw = buf.Bytes()
	return ev, nil
}

// Decode decodes the payload into v.
func (e Event) Decode(v any) error { return json.Unmarshal(e.Payload, v) }

// field returns one string field of the payload ("" when absent).
func (e Event) field(name string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(e.Payload, &m) != nil {
		return ""
	}
	var s string
	_ = json.Unmarshal(m[name], &s)
	return s
}

// TurnID is the payload's turnId (turn.started, turn.done, turn.queued,
// turn.dequeued), else "".
func (e Event) TurnID() string { return e.field("turnId") }

// Text is the payload's text (message.delta, message.reasoning,
// message.done, message.user), else "".
func (e Event) Text() string { return e.field("text") }

// ErrUnsubscribed is returned by Next after Close.
var ErrUnsubscribed = errors.New("client: subscription closed")

// maxBuffered bounds the events a stream holds for its subscriber; past it
// the connection's reader waits (the daemon then holds the session's events
// back: a slow consumer slows its own connection down).
const maxBuffered = 4096

// streamOwner is what a stream needs of its client: the store behind the
// connection, to fill a gap, and whether the reader may wait for room.
type streamOwner interface {
	// fetchAfter returns the session's stored events with seq > after
	// (session.resume, which keeps the connection subscribed).
	fetchAfter(ctx context.Context, sessionID string, after int64) ([]Event, error)
	// callWaiting tells whether some call waits for its reply (which only
	// the reader can deliver, so the reader must not wait for room), and
	// returns a channel closed when the next call starts.
	callWaiting() (bool, <-chan struct{})
}

// stream puts one session's events in seq order. The connection delivers
// them in arrival order from one reader; events that arrive before the
// starting point is known wait in early, and so do those after a gap, which
// the subscriber fills from the store before it delivers them.
type stream struct {
	id    string
	owner streamOwner // nil: never fetch (tests)

	mu       sync.Mutex
	next     int64           // the seq delivered next; 0 = starting point unknown
	early    map[int64]Event // received, not yet deliverable
	ready    []Event         // in order, waiting for Next
	gap      bool            // events from next on were dropped: fetch them
	fetching bool            // a subscriber is filling a gap
	retryAt  time.Time       // a fetch that brought nothing is retried then
	backoff  time.Duration   // the wait after the last fetch that brought nothing
	wake     chan struct{}   // closed when ready grows, a gap is seen or the stream ends
	room     chan struct{}   // closed when the subscriber takes events
	err      error           // set when the stream ended
	// received is the highest seq queued for delivery: held for Next, or
	// dropped while full and so fetched from the store. Events dropped
	// for good (before the starting point, after the end) and events
	// voided by a retracted notice do not count.
	received int64
}

func newStream(id string, owner streamOwner) *stream {
	return &stream{id: id, owner: owner, early: map[int64]Event{}, wake: make(chan struct{}), room: make(chan struct{})}
}

// add takes one event from the reader. Duplicates and events before the
// starting point are dropped. While the stream is full it waits for the
// subscriber (within ctx), unless a call waits for its reply: then the
// event is dropped and marked as a gap, which the subscriber fetches from
// the store. No event is lost either way.
func (s *stream) add(ctx context.Context, ev Event) {
	if ev.Retracted {
		s.retract(ev)
		return
	}
	for {
		s.mu.Lock()
		if s.err != nil || (s.next > 0 && ev.Seq < s.next) {
			s.mu.Unlock()
			return
		}
		if _, dup := s.early[ev.Seq]; dup {
			s.mu.Unlock()
			return
		}
		if len(s.ready)+len(s.early) < maxBuffered {
			s.early[ev.Seq] = ev
			if s.next > 0 {
				s.received = max(s.received, ev.Seq)
			}
			s.flush()
			s.mu.Unlock()
			return
		}
		waiting, callStarted := false, (<-chan struct{})(nil)
		if s.owner != nil {
			waiting, callStarted = s.owner.callWaiting()
		}
		if waiting {
			s.dropFrom(ev.Seq)
			s.mu.Unlock()
			return
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-callStarted:
		case <-ctx.Done():
			return
		}
	}
}

// retract delivers a lease_lost notice (ev, marked Retracted) after what
// is ready and moves the stream back to its seq: the events received from
// memory from there on are void, and the log's events under those seqs are
// delivered next, as they arrive.
func (s *stream) retract(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.next == 0 {
		return
	}
	for k := range s.early {
		if k >= ev.Seq {
			delete(s.early, k)
		}
	}
	s.ready = append(s.ready, ev)
	s.next = min(s.next, ev.Seq)
	// The voided seqs are delivered again from the log: what was received
	// from them no longer counts.
	s.received = min(s.received, ev.Seq-1)
	s.signal()
}

// dropFrom forgets the events from seq on and marks the gap. s.mu is held.
func (s *stream) dropFrom(seq int64) {
	for k := range s.early {
		if k >= seq {
			delete(s.early, k)
		}
	}
	s.gap = true
	s.received = max(s.received, seq)
	s.signal()
}

// fill adds events fetched from the store (no bound: they are in memory
// already). s.mu is held.
func (s *stream) fill(evs []Event) {
	for _, ev := range evs {
		if s.next > 0 && ev.Seq < s.next {
			continue
		}
		s.early[ev.Seq] = ev
		if s.next > 0 {
			s.received = max(s.received, ev.Seq)
		}
	}
	s.flush()
}

// start sets the seq the stream delivers first, with the events stored
// after the starting point already known (a stream closed by its subscriber
// is reopened).
func (s *stream) start(next int64, stored ...Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.err, ErrUnsubscribed) {
		s.err = nil
	}
	s.next = next
	for seq := range s.early {
		if seq < next {
			delete(s.early, seq)
		} else {
			s.received = max(s.received, seq)
		}
	}
	s.fill(stored)
	s.signal()
}

// started reports whether the stream has a starting point and is open.
func (s *stream) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next > 0 && s.err == nil
}

// refill fetches the events after the last one the stream has, with fetch
// (on a new connection, which session.resume subscribes), and adds them. A
// stream not started or ended is left alone.
func (s *stream) refill(fetch func(after int64) ([]Event, error)) error {
	s.mu.Lock()
	if s.next == 0 || s.err != nil || s.fetching {
		s.mu.Unlock()
		return nil
	}
	s.fetching = true
	after := s.next - 1
	s.mu.Unlock()
	evs, err := fetch(after)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetching = false
	if err != nil {
		return err
	}
	s.fill(evs)
	s.signal()
	return nil
}

// flush moves the events that follow without a gap to ready. s.mu is held.
func (s *stream) flush() {
	if s.next == 0 {
		return
	}
	moved := false
	for {
		ev, ok := s.early[s.next]
		if !ok {
			break
		}
		delete(s.early, s.next)
		s.ready = append(s.ready, ev)
		s.next++
		moved = true
	}
	if moved {
		s.signal()
	}
}

// signal wakes the subscriber. s.mu is held.
func (s *stream) signal() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// close ends the stream with err; events already ready are still delivered.
func (s *stream) close(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	s.early = map[int64]Event{}
	if s.next > 0 {
		// Only what is ready is still delivered.
		s.received = min(s.received, s.next-1)
	}
	s.signal()
	close(s.room)
	s.room = make(chan struct{})
}

// pop returns the next event, waiting for it within ctx. When events are
// missing (seen after a gap, or dropped while full) it fetches them from the
// store at once instead of waiting for them.
func (s *stream) pop(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.ready) > 0 {
			ev := s.ready[0]
			s.ready[0] = Event{}
			s.ready = s.ready[1:]
			if len(s.ready) == 0 {
				s.ready = nil // let a large backlog's array go
			}
			close(s.room)
			s.room = make(chan struct{})
			s.mu.Unlock()
			return ev, nil
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return Event{}, err
		}
		var retry <-chan time.Time
		if s.owner != nil && s.next > 0 && !s.fetching && (s.gap || len(s.early) > 0) {
			if !s.retryAt.IsZero() && time.Now().Before(s.retryAt) {
				retry = time.After(time.Until(s.retryAt))
			} else {
				if err := s.fillGap(ctx); err != nil {
					return Event{}, err
				}
				continue
			}
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-retry:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// fillGap fetches the events after the last delivered one from the store.
// s.mu is held on entry and released on return. Events the reader drops
// after the gap flag is cleared were sent after the fetch started, so a
// later fetch (or the live stream) brings them.
func (s *stream) fillGap(ctx context.Context) error {
	s.gap, s.fetching = false, true
	after := s.next - 1
	s.mu.Unlock()
	evs, err := s.owner.fetchAfter(ctx, s.id, after)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetching = false
	if err != nil {
		s.gap = true
		if s.err != nil { // the stream ended meanwhile: report that
			return nil
		}
		return fmt.Errorf("client: fetching the events of %s after seq %d: %w", s.id, after, err)
	}
	s.fill(evs)
	s.retryAt = time.Time{}
	if len(s.ready) == 0 {
		// The store did not have the missing events yet (still being
		// committed): they come live, or from the next fetch a little later.
		s.backoff = min(max(2*s.backoff, 50*time.Millisecond), 2*time.Second)
		s.retryAt = time.Now().Add(s.backoff)
	} else {
		s.backoff = 0
	}
	return nil
}

// Subscription delivers one session's events in seq order, from the point
// where it subscribed, with no gap and no duplicate. At most a few thousand
// events wait in memory for Next; beyond that the connection slows down.
type Subscription struct {
	s *stream
}

// SessionID is the session whose events this subscription delivers.
func (sub *Subscription) SessionID() string { return sub.s.id }

// Next returns the next event, waiting within ctx. It fails with ErrClosed
// once the connection closed and every received event was returned, and
// with ErrUnsubscribed after Close.
func (sub *Subscription) Next(ctx context.Context) (Event, error) { return sub.s.pop(ctx) }

// Received is the highest seq the connection has brought for this
// subscription so far that Next delivers (0 before any): events dropped as
// duplicates, before the starting point or after Close, and events voided
// by a retracted notice (which moves it back to before the notice's seq),
// do not count. Next returns every event up to it in time, from memory or
// fetched from the store. A daemon request handled
// meanwhile (approval.request comes after the events of its turn) can wait
// until Next has passed Received to keep the events' order.
func (sub *Subscription) Received() int64 {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	return sub.s.received
}

// Close stops buffering events for this subscription. The daemon keeps
// sending them for the connection's life; they are dropped.
func (sub *Subscription) Close() { sub.s.close(ErrUnsubscribed) }
