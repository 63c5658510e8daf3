package rpc

import (
	"sync"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"google.golang.org/grpc"

	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store"
)

// renderedPage collects a session's events rendered as the protocol's JSON
// objects of session events (codec.StoredEvents: the bytes the facade
// would make of a RawEvent), comma-separated in one buffer, and sends them
// as rendered_events items of at most maxBatchBytes each (a larger event
// alone). One buffer per page instead of a RawEvent, a string and a
// message per event on both sides of the gRPC stream.
type renderedPage struct {
	sessionID string
	frames    bool                // each object in its session.event frame
	render    *codec.StoredEvents // of sessionID, made on first use
	json      []byte
	ends      []uint32
	seqs      []int64
	chunk     []uint32
}

// addEvent renders an event (its bytes are copied).
func (p *renderedPage) addEvent(e *store.Event) error {
	if n := len(e.Payload) + eventOverhead; n > MaxSendMsgSize {
		return tooLarge(*e, n)
	}
	p.append(e.Seq, e.Kind, e.TS, e.Payload, e.Unstored)
	return nil
}

func (p *renderedPage) append(seq int64, kind string, ts time.Time, payload []byte, unstored bool) {
	if len(p.ends) > 0 {
		p.json = append(p.json, ',')
	}
	if p.render == nil {
		p.render = codec.NewStoredEvents(p.sessionID)
	}
	if p.frames {
		p.json = append(p.json, codec.EventFramePrefix...)
	}
	p.json = p.render.Append(p.json, seq, kind, ts, payload, unstored)
	if p.frames {
		p.json = append(p.json, codec.EventFrameSuffix...)
	}
	p.ends = append(p.ends, uint32(len(p.json)))
	p.seqs = append(p.seqs, seq)
}

// flush sends the page's events, in items of at most maxBatchBytes of JSON
// (an event larger than that alone), and empties the page for reuse: Send
// encodes the message before it returns.
func (p *renderedPage) flush(stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) error {
	defer p.reset()
	first, start := 0, 0 // first event and its offset in json of the next item
	for first < len(p.ends) {
		last := first // the item holds events first..last
		for last+1 < len(p.ends) && int(p.ends[last+1])-start <= maxBatchBytes {
			last++
		}
		ends := p.ends[first : last+1]
		if start > 0 {
			p.chunk = p.chunk[:0]
			for _, e := range ends {
				p.chunk = append(p.chunk, e-uint32(start))
			}
			ends = p.chunk
		}
		end := int(p.ends[last])
		err := stream.Send(&trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_RenderedEvents{
			RenderedEvents: &trellisv1.RenderedEvents{Json: p.json[start:end], Ends: ends, Seqs: p.seqs[first : last+1]},
		}})
		if err != nil {
			return err
		}
		first, start = last+1, end+1
	}
	return nil
}

// renderedPages keeps pages' buffers between streams: a replay's page
// grows to about maxBatchBytes, and each stream would otherwise grow a new
// one from nothing (an eighth of what a 100k-event resume allocated).
var renderedPages = sync.Pool{New: func() any { return new(renderedPage) }}

// newRenderedPage returns an empty page of the session's events, with
// buffers a finished stream left (release).
func newRenderedPage(sessionID string, frames bool) *renderedPage {
	p := renderedPages.Get().(*renderedPage)
	p.sessionID, p.frames, p.render = sessionID, frames, nil
	return p
}

// release empties the page and keeps its buffers for another stream.
func (p *renderedPage) release() {
	p.reset()
	p.render = nil
	renderedPages.Put(p)
}

func (p *renderedPage) reset() {
	p.json, p.ends, p.seqs = p.json[:0], p.ends[:0], p.seqs[:0]
	// A page that held a large event does not keep its buffer.
	if cap(p.json) > 4*maxBatchBytes {
		p.json = nil
	}
}
