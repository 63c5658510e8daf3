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
)

// pagedRead reads a Subscribe of a session from after, the replay then the
// live events up to (and with) seq until, as the JSON objects of the
// events: from its pages (checked by codec.PageObjects), or, typed, Marshal
// of each typed event (what a typed client makes of them).
func pagedRead(ctx context.Context, sessions trellisv1.SessionServiceClient, id string, after int64, typed bool, until <-chan int64) (objs []string, seqs []int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := sessions.Subscribe(ctx, &trellisv1.SubscribeRequest{SessionId: id, AfterSeq: after, Typed: typed})
	if err != nil {
		return nil, nil, err
	}
	end := int64(-1)
	for end < 0 || (len(seqs) > 0 && seqs[len(seqs)-1] < end) {
		resp, err := stream.Recv()
		if err != nil {
			return nil, nil, fmt.Errorf("Subscribe (typed %v): %v", typed, err)
		}
		switch {
		case resp.GetCaughtUp() != nil:
			end = <-until
		case resp.GetEvents() != nil:
			if typed {
				return nil, nil, errors.New("a page from a typed Subscribe")
			}
			page, err := codec.PageObjects(resp.GetEvents(), nil)
			if err != nil {
				return nil, nil, err
			}
			for i, obj := range page {
				objs = append(objs, string(obj))
				seqs = append(seqs, resp.GetEvents().GetSeqs()[i])
			}
		case resp.GetEvent() != nil:
			if !typed {
				return nil, nil, errors.New("a typed event from a paged Subscribe")
			}
			objs = append(objs, string(codec.Marshal(resp.GetEvent())))
			seqs = append(seqs, resp.GetEvent().GetSeq())
		}
	}
	return objs, seqs, nil
}

// TestRenderedSubscribeIsTheTypedRendering: a Subscribe's pages carry, byte
// for byte, the protocol's rendering of the typed events (replay and
// live), and session.resume's answer holds the same objects, as does gRPC
// ResumeSession's page and the rendering of its typed events.
func TestRenderedSubscribeIsTheTypedRendering(t *testing.T) {
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
			modes := []bool{true, false} // typed, paged
			results := make([]chan read, len(modes))
			untils := make([]chan int64, len(modes))
			for i, typed := range modes {
				results[i], untils[i] = make(chan read, 1), make(chan int64, 1)
				go func() {
					objs, seqs, err := pagedRead(g.outgoing(ctx), sessions, id, after, typed, untils[i])
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
			raw, rendered := <-results[0], <-results[1]
			for _, r := range []read{raw, rendered} {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			if len(raw.objs) == 0 || int64(len(raw.objs)) != end-after {
				t.Fatalf("typed Subscribe: %d events after %d, want %d", len(raw.objs), after, end-after)
			}
			if len(rendered.objs) != len(raw.objs) {
				t.Fatalf("paged Subscribe: %d events, typed %d", len(rendered.objs), len(raw.objs))
			}
			for i := range raw.objs {
				if rendered.objs[i] != raw.objs[i] || rendered.seqs[i] != raw.seqs[i] {
					t.Fatalf("event %d: paged (seq %d)\n%s\ntyped (seq %d)\n%s", i, rendered.seqs[i], rendered.objs[i], raw.seqs[i], raw.objs[i])
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

			// And so does gRPC ResumeSession: its page, and the rendering
			// of its typed events when the request says typed.
			page, err := sessions.ResumeSession(g.outgoing(ctx), &trellisv1.ResumeSessionRequest{SessionId: id, AfterSeq: &after})
			if err != nil {
				t.Fatal(err)
			}
			typed, err := sessions.ResumeSession(g.outgoing(ctx), &trellisv1.ResumeSessionRequest{SessionId: id, AfterSeq: &after, Typed: true})
			if err != nil {
				t.Fatal(err)
			}
			objs, err := codec.PageObjects(page.GetEvents(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.GetTypedEvents()) != 0 || typed.GetEvents() != nil || len(objs) != len(res.Events) || len(typed.GetTypedEvents()) != len(res.Events) {
				t.Fatalf("gRPC ResumeSession: %d objects and %d typed events, typed: %d typed events and a page %v; want %d events each way",
					len(objs), len(page.GetTypedEvents()), len(typed.GetTypedEvents()), typed.GetEvents() != nil, len(res.Events))
			}
			for i, obj := range objs {
				if !bytes.Equal(obj, res.Events[i]) || page.GetEvents().GetSeqs()[i] != after+int64(i)+1 {
					t.Fatalf("gRPC ResumeSession event %d (seq %d):\n%s\nwant\n%s", i, page.GetEvents().GetSeqs()[i], obj, res.Events[i])
				}
				if got := codec.Marshal(typed.GetTypedEvents()[i]); !bytes.Equal(got, res.Events[i]) {
					t.Fatalf("gRPC ResumeSession typed event %d:\n%s\nwant\n%s", i, got, res.Events[i])
				}
			}
		})
	}
}
