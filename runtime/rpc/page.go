package rpc

import (
	"sync"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store"
)

// Bounds of one page (an EventPage item of Subscribe and SubscribeSessions):
// at most maxPageEvents events and, past the first, about maxPageBytes of
// payload (eventlog.Overhead counted per event).
const (
	maxPageEvents = 4096
	maxPageBytes  = 1 << 20
)

// eventPage collects a session's events as the protocol's JSON objects of
// session events (codec.StoredEvents), comma-separated in one buffer, with
// each object's end and seq: the one shape the runtime delivers events in.
// One buffer per page instead of a message and strings per event on both
// sides of the gRPC stream.
type eventPage struct {
	render *codec.StoredEvents
	json   []byte
	ends   []uint32
	seqs   []int64
}

// add renders an event into the page; its bytes are copied (the event may
// point into the store's buffers).
func (p *eventPage) add(e *store.Event) error {
	if len(p.ends) > 0 {
		p.json = append(p.json, ',')
	}
	p.json = p.render.Append(p.json, e.Seq, e.Kind, e.TS, e.Payload, codec.DeliveryOf(e.Unstored, e.Retracted))
	p.ends = append(p.ends, uint32(len(p.json)))
	p.seqs = append(p.seqs, e.Seq)
	return nil
}

// message is the page as an item; it shares the page's buffers, so it is
// sent before the page is reset (Send encodes it before it returns).
func (p *eventPage) message() *trellisv1.EventPage {
	return &trellisv1.EventPage{Json: p.json, Ends: p.ends, Seqs: p.seqs}
}

func (p *eventPage) reset() {
	p.json, p.ends, p.seqs = p.json[:0], p.ends[:0], p.seqs[:0]
	// A page that held a large event does not keep its buffer.
	if cap(p.json) > 4*maxPageBytes {
		p.json = nil
	}
}

// pages keeps pages' buffers between streams: a replay's page grows to
// about maxPageBytes, and each stream would otherwise grow a new one from
// nothing.
var pages = sync.Pool{New: func() any { return new(eventPage) }}

// newEventPage returns an empty page of the session's events, with
// buffers a finished stream left (release).
func newEventPage(sessionID string) *eventPage {
	p := pages.Get().(*eventPage)
	p.render = codec.NewStoredEvents(sessionID)
	return p
}

// release empties the page and keeps its buffers for another stream.
func (p *eventPage) release() {
	p.reset()
	p.render = nil
	pages.Put(p)
}
