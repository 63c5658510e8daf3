package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Event is one session event (PROTOCOL.md §7), the params of a session.event
// notification.
type Event struct {
	SessionID string          `json:"sessionId"`
	Seq       int64           `json:"seq"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload"`
	TS        string          `json:"ts"`
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

// stream puts one session's events in seq order. Events that arrive before
// its starting point is known, or ahead of a missing one, wait in early.
type stream struct {
	id string

	mu    sync.Mutex
	next  int64           // the seq delivered next; 0 = starting point unknown
	early map[int64]Event // received, not yet deliverable
	ready []Event         // in order, waiting for Next
	wake  chan struct{}   // closed when ready grows or the stream ends
	err   error           // set when the stream ended
}

func newStream(id string) *stream {
	return &stream{id: id, early: map[int64]Event{}, wake: make(chan struct{})}
}

// add takes one event, in any order; duplicates and events before the
// starting point are dropped.
func (s *stream) add(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || (s.next > 0 && ev.Seq < s.next) {
		return
	}
	s.early[ev.Seq] = ev
	s.flush()
}

// start sets the seq the stream delivers first (a stream closed by its
// subscriber is reopened).
func (s *stream) start(next int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.err, ErrUnsubscribed) {
		s.err = nil
	}
	s.next = next
	for seq := range s.early {
		if seq < next {
			delete(s.early, seq)
		}
	}
	s.flush()
}

// started reports whether the stream has a starting point and is open.
func (s *stream) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next > 0 && s.err == nil
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
		close(s.wake)
		s.wake = make(chan struct{})
	}
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
	close(s.wake)
	s.wake = make(chan struct{})
}

// pop returns the next ready event, waiting for it within ctx.
func (s *stream) pop(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.ready) > 0 {
			ev := s.ready[0]
			s.ready[0] = Event{}
			s.ready = s.ready[1:]
			s.mu.Unlock()
			return ev, nil
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return Event{}, err
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Subscription delivers one session's events in seq order, from the point
// where it subscribed, with no gap and no duplicate. Events wait in memory
// until Next takes them.
type Subscription struct {
	s *stream
}

// SessionID is the session whose events this subscription delivers.
func (sub *Subscription) SessionID() string { return sub.s.id }

// Next returns the next event, waiting within ctx. It fails with ErrClosed
// once the connection closed and every received event was returned, and
// with ErrUnsubscribed after Close.
func (sub *Subscription) Next(ctx context.Context) (Event, error) { return sub.s.pop(ctx) }

// Close stops buffering events for this subscription. The daemon keeps
// sending them for the connection's life; they are dropped.
func (sub *Subscription) Close() { sub.s.close(ErrUnsubscribed) }
