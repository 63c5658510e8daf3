package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// muxWatcher reads a SubscribeSessions stream and checks, per watch, that
// events come in seq order from after_seq+1 with no gap and no duplicate,
// tagged with the watch's session, and one caught_up after the replay.
type muxWatcher struct {
	t       *testing.T
	stream  grpc.BidiStreamingClient[trellisv1.SubscribeSessionsRequest, trellisv1.SubscribeSessionsResponse]
	items   chan *trellisv1.SubscribeSessionsResponse
	watches map[uint64]*muxWatchState
	reused  *trellisv1.SubscribeSessionsResponse
}

// newMuxWatcher reads stream's items into m.items (buffered by buf) until
// the stream ends.
func newMuxWatcher(t *testing.T, stream grpc.BidiStreamingClient[trellisv1.SubscribeSessionsRequest, trellisv1.SubscribeSessionsResponse], buf int) *muxWatcher {
	m := &muxWatcher{t: t, stream: stream, items: make(chan *trellisv1.SubscribeSessionsResponse, buf), watches: map[uint64]*muxWatchState{}}
	go func() {
		defer close(m.items)
		for {
			it, err := stream.Recv()
			if err != nil {
				return
			}
			m.items <- it
		}
	}()
	return m
}

type muxWatchState struct {
	session  string
	last     int64
	caughtUp int
	cuSeq    int64
	ended    *trellisv1.WatchEnded
	closed   bool // unwatched: nothing of it may arrive after the barrier
}

func (m *muxWatcher) watch(id uint64, session string, after int64) {
	m.t.Helper()
	m.watches[id] = &muxWatchState{session: session, last: max(after, 0)}
	if err := m.stream.Send(&trellisv1.SubscribeSessionsRequest{Op: &trellisv1.SubscribeSessionsRequest_Watch{
		Watch: &trellisv1.WatchSession{WatchId: id, SessionId: session, AfterSeq: after}}}); err != nil {
		m.t.Fatal(err)
	}
}

func (m *muxWatcher) unwatch(id uint64) {
	m.t.Helper()
	if err := m.stream.Send(&trellisv1.SubscribeSessionsRequest{Op: &trellisv1.SubscribeSessionsRequest_Unwatch{
		Unwatch: &trellisv1.UnwatchSession{WatchId: id}}}); err != nil {
		m.t.Fatal(err)
	}
}

// until reads items until done says so.
func (m *muxWatcher) until(what string, done func() bool) {
	m.t.Helper()
	timeout := time.After(60 * time.Second)
	for !done() {
		select {
		case it, ok := <-m.items:
			if !ok {
				m.t.Fatalf("the stream ended while waiting for %s", what)
			}
			m.check(it)
		case <-timeout:
			m.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (m *muxWatcher) check(it *trellisv1.SubscribeSessionsResponse) {
	m.t.Helper()
	w := m.watches[it.GetWatchId()]
	if w != nil && it.GetEnded() != nil && it.GetSessionId() != w.session {
		m.reused = it // the refusal of a second watch with an open watch_id
		return
	}
	switch {
	case w == nil:
		m.t.Fatalf("an item of watch %d, never opened: %v", it.GetWatchId(), it)
	case w.closed:
		m.t.Fatalf("an item of watch %d after its unwatch was processed: %v", it.GetWatchId(), it)
	case w.ended != nil:
		m.t.Fatalf("an item of watch %d after it ended: %v", it.GetWatchId(), it)
	case it.GetSessionId() != w.session:
		m.t.Fatalf("watch %d: session %q, want %q", it.GetWatchId(), it.GetSessionId(), w.session)
	}
	switch {
	case it.GetEvents() != nil:
		objs, err := codec.PageObjects(it.GetEvents(), nil)
		if err != nil {
			m.t.Fatalf("watch %d: %v", it.GetWatchId(), err)
		}
		for i, obj := range objs {
			ev, err := codec.DecodeEvent(obj)
			if err != nil || ev.GetSeq() != w.last+1 || ev.GetSeq() != it.GetEvents().GetSeqs()[i] || ev.GetSessionId() != w.session {
				m.t.Fatalf("watch %d: event %s after seq %d (%v)", it.GetWatchId(), obj, w.last, err)
			}
			w.last = ev.GetSeq()
		}
	case it.GetCaughtUp() != nil:
		w.caughtUp++
		w.cuSeq = it.GetCaughtUp().GetSeq()
		if w.caughtUp > 1 || w.cuSeq != w.last {
			m.t.Fatalf("watch %d: caught_up %d (#%d) after seq %d", it.GetWatchId(), w.cuSeq, w.caughtUp, w.last)
		}
	case it.GetEnded() != nil:
		w.ended = it.GetEnded()
	default:
		m.t.Fatalf("an empty item: %v", it)
	}
}

func lastSeqOf(evs []map[string]any) int64 {
	return int64(evs[len(evs)-1]["seq"].(float64))
}

// TestSubscribeSessionsOverGRPC: one SubscribeSessions stream watches two
// sessions (their events arrive tagged and in order), an unknown session
// ends its own watch with not_found while the others go on, an unwatch
// stops a watch, and a new watch of the same session (a new watch_id)
// continues from where the client asks with nothing of the old watch.
func TestSubscribeSessionsOverGRPC(t *testing.T) {
	d := startDaemon(t)
	g := dialGRPC(t, d)
	a, b := createSession(t, g, nil), createSession(t, g, nil)
	lastA := lastSeqOf(promptComplete(t, g, a, "hello"))
	lastB := lastSeqOf(promptComplete(t, g, b, "hello"))

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(g.outgoing(context.Background()))
	defer cancel()
	stream, err := trellisv1.NewSessionServiceClient(conn).SubscribeSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := newMuxWatcher(t, stream, 1024)

	m.watch(1, a, 0)
	m.watch(2, b, 0)
	m.watch(3, "s-unknown", 0)
	m.until("both replays and the unknown session's end", func() bool {
		return m.watches[1].caughtUp > 0 && m.watches[2].caughtUp > 0 && m.watches[3].ended != nil
	})
	if m.watches[1].cuSeq < lastA || m.watches[2].cuSeq < lastB {
		t.Errorf("caught up at %d and %d, want at least %d and %d", m.watches[1].cuSeq, m.watches[2].cuSeq, lastA, lastB)
	}
	if e := m.watches[3].ended; e.GetCode() != "not_found" {
		t.Errorf("the unknown session's watch ended %v, want not_found", e)
	}

	// Unwatch b; a refused watch behind it tells when the runtime has read
	// the unwatch (requests are handled in order).
	m.unwatch(2)
	m.watch(4, "", 0)
	m.until("the barrier", func() bool { return m.watches[4].ended != nil })
	if e := m.watches[4].ended; e.GetCode() != "invalid_params" {
		t.Errorf("a watch without a session ended %v, want invalid_params", e)
	}
	m.watches[2].closed = true
	oldB := m.watches[2].last

	// a goes on live; b's new events reach nobody until b is watched again.
	lastA2 := lastSeqOf(promptComplete(t, g, a, "hello"))
	lastB2 := lastSeqOf(promptComplete(t, g, b, "hello"))
	m.until("a's live events", func() bool { return m.watches[1].last >= lastA2 })
	m.watch(5, b, oldB)
	m.until("b's new watch", func() bool { return m.watches[5].caughtUp > 0 && m.watches[5].last >= lastB2 })

	// A reused open watch_id is refused without touching the open watch.
	m.watch(6, a, 0)
	if err := stream.Send(&trellisv1.SubscribeSessionsRequest{Op: &trellisv1.SubscribeSessionsRequest_Watch{
		Watch: &trellisv1.WatchSession{WatchId: 1, SessionId: b, AfterSeq: 0}}}); err != nil {
		t.Fatal(err)
	}
	m.until("the reused watch_id's refusal", func() bool { return m.reused != nil })
	if e := m.reused.GetEnded(); e.GetCode() != "invalid_params" {
		t.Errorf("reused watch_id: %v, want invalid_params", e)
	}
	m.until("watch 6's replay", func() bool { return m.watches[6].caughtUp > 0 })
	lastA3 := lastSeqOf(promptComplete(t, g, a, "hello"))
	m.until("a's events on both its watches", func() bool { return m.watches[1].last >= lastA3 && m.watches[6].last >= lastA3 })

	// Closing the send side keeps the open watches; cancelling ends it.
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	lastA4 := lastSeqOf(promptComplete(t, g, a, "hello"))
	m.until("a's events after CloseSend", func() bool { return m.watches[1].last >= lastA4 })
}

// Without a token the stream is refused like every other call.
func TestSubscribeSessionsNeedsAToken(t *testing.T) {
	d := startDaemon(t)
	conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", fmt.Sprint(d.GRPCPort())), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := trellisv1.NewSessionServiceClient(conn).SubscribeSessions(context.Background())
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("SubscribeSessions without a token: %v, want Unauthenticated", err)
	}
}
