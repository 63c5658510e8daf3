package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// renderedRead reads a batched raw Subscribe of a session from after, the
// replay then the live events up to (and with) seq until, as the JSON
// objects of the events: from rendered_events items when rendered (taken
// out of their session.event frames, checked to be
// jsonrpc.NotificationFrame's bytes, with frames), else
// codec.AppendRawEvent of each raw event (what the facade made of them
// before rendered pages).
func renderedRead(ctx context.Context, sessions trellisv1.SessionServiceClient, id string, after int64, rendered, frames bool, until <-chan int64) (objs []string, seqs []int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := sessions.Subscribe(ctx, &trellisv1.SubscribeRequest{SessionId: id, AfterSeq: after, RawPayload: true, RawBatches: true, Rendered: rendered, RenderedFrames: frames})
	if err != nil {
		return nil, nil, err
	}
	end := int64(-1)
	for end < 0 || (len(seqs) > 0 && seqs[len(seqs)-1] < end) {
		resp, err := stream.Recv()
		if err != nil {
			return nil, nil, fmt.Errorf("Subscribe (rendered %v): %v", rendered, err)
		}
		if resp.GetCaughtUp() != nil {
			end = <-until
			continue
		}
		if re := resp.GetRenderedEvents(); re != nil {
			if !rendered {
				return nil, nil, errors.New("rendered_events without asking for them")
			}
			if len(re.GetEnds()) != len(re.GetSeqs()) {
				return nil, nil, fmt.Errorf("rendered_events: %d ends, %d seqs", len(re.GetEnds()), len(re.GetSeqs()))
			}
			start := 0
			for i, e := range re.GetEnds() {
				obj := re.GetJson()[start:e]
				if frames {
					var ok bool
					if obj, ok = bytes.CutPrefix(obj, []byte(codec.EventFramePrefix)); ok {
						obj, ok = bytes.CutSuffix(obj, []byte(codec.EventFrameSuffix))
					}
					if !ok || !bytes.Equal(re.GetJson()[start:e], jsonrpc.NotificationFrame("session.event", obj)) {
						return nil, nil, fmt.Errorf("rendered_events: frame %d is not a session.event notification: %s", i, re.GetJson()[start:e])
					}
				}
				objs = append(objs, string(obj))
				seqs = append(seqs, re.GetSeqs()[i])
				if int(e) < len(re.GetJson()) && re.GetJson()[e] != ',' {
					return nil, nil, fmt.Errorf("rendered_events: %q after object %d", re.GetJson()[e], i)
				}
				start = int(e) + 1
			}
			if start != len(re.GetJson())+1 {
				return nil, nil, fmt.Errorf("rendered_events: the objects end at %d of %d bytes", start-1, len(re.GetJson()))
			}
			continue
		}
		if rendered {
			return nil, nil, fmt.Errorf("rendered Subscribe sent %T", resp.GetItem())
		}
		for _, raw := range resp.GetRawEvents().GetEvents() {
			objs = append(objs, string(codec.AppendRawEvent(nil, raw)))
			seqs = append(seqs, raw.GetSeq())
		}
	}
	return objs, seqs, nil
}

// TestRenderedSubscribeIsTheRawRendering: a Subscribe with rendered pages
// carries, byte for byte, the objects the facade renders of the raw
// events (replay and live), in their session.event frames when asked, and
// session.resume's answer splices them.
func TestRenderedSubscribeIsTheRawRendering(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	for i := 0; i < 2; i++ {
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.done", 1)
	}
	g := dialGRPC(t, d)
	sessions := trellisv1.NewSessionServiceClient(g.conn)
	stored := storedSeq(t, c, id)
	if stored < 6 {
		t.Fatalf("the session has %d events", stored)
	}

	for _, after := range []int64{0, 3} {
		t.Run(fmt.Sprintf("after %d", after), func(t *testing.T) {
			// Both streams replay, then follow one more turn live.
			type read struct {
				objs []string
				seqs []int64
				err  error
			}
			modes := []struct{ rendered, frames bool }{{false, false}, {true, false}, {true, true}}
			results := make([]chan read, len(modes))
			untils := make([]chan int64, len(modes))
			for i, m := range modes {
				results[i], untils[i] = make(chan read, 1), make(chan int64, 1)
				go func() {
					objs, seqs, err := renderedRead(g.outgoing(ctx), sessions, id, after, m.rendered, m.frames, untils[i])
					results[i] <- read{objs, seqs, err}
				}()
			}
			// Give both time to go live (the events of the turn are read
			// either way: live, or in the replay of a stream not live yet).
			time.Sleep(100 * time.Millisecond)
			if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
				t.Fatal(err)
			}
			evs := collect(t, c.Events(id), "turn.done", 1)
			end := seqOf(evs[len(evs)-1])
			for i := range untils {
				untils[i] <- end
			}
			raw, rendered, framed := <-results[0], <-results[1], <-results[2]
			for _, r := range []read{raw, rendered, framed} {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			if len(framed.objs) != len(raw.objs) {
				t.Fatalf("rendered Subscribe with frames: %d events, raw %d", len(framed.objs), len(raw.objs))
			}
			for i := range raw.objs {
				if framed.objs[i] != raw.objs[i] || framed.seqs[i] != raw.seqs[i] {
					t.Fatalf("event %d: in a frame (seq %d)\n%s\nraw (seq %d)\n%s", i, framed.seqs[i], framed.objs[i], raw.seqs[i], raw.objs[i])
				}
			}
			if len(raw.objs) == 0 || int64(len(raw.objs)) != end-after {
				t.Fatalf("raw Subscribe: %d events after %d, want %d", len(raw.objs), after, end-after)
			}
			if len(rendered.objs) != len(raw.objs) {
				t.Fatalf("rendered Subscribe: %d events, raw %d", len(rendered.objs), len(raw.objs))
			}
			for i := range raw.objs {
				if rendered.objs[i] != raw.objs[i] || rendered.seqs[i] != raw.seqs[i] {
					t.Fatalf("event %d: rendered (seq %d)\n%s\nraw (seq %d)\n%s", i, rendered.seqs[i], rendered.objs[i], raw.seqs[i], raw.objs[i])
				}
				if rendered.seqs[i] != after+int64(i)+1 {
					t.Fatalf("event %d: seq %d, want %d", i, rendered.seqs[i], after+int64(i)+1)
				}
			}

			// session.resume's answer holds the same objects.
			w := helloWS(t, d)
			var res struct {
				Events []json.RawMessage `json:"events"`
				More   bool              `json:"more"`
			}
			if err := w.Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": after}, &res); err != nil {
				t.Fatal(err)
			}
			if res.More || len(res.Events) < len(raw.objs) {
				t.Fatalf("session.resume: %d events, more %v; want at least %d", len(res.Events), res.More, len(raw.objs))
			}
			for i := range raw.objs {
				if !bytes.Equal(res.Events[i], []byte(raw.objs[i])) {
					t.Fatalf("session.resume event %d:\n%s\nwant\n%s", i, res.Events[i], raw.objs[i])
				}
			}
		})
	}
}
