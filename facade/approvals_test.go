package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/jsonrpc/jsonrpctest"
)

// fakeApprovals is an ApprovalService whose Attach streams the test drives.
type fakeApprovals struct {
	trellisv1.UnimplementedApprovalServiceServer
	streams chan *fakeAttach
	refuse  bool // answer Attach with Unimplemented
}

// fakeAttach is one Attach stream: what the facade sent, a way to answer,
// and a way to end it.
type fakeAttach struct {
	stream grpc.BidiStreamingServer[trellisv1.AttachRequest, trellisv1.AttachResponse]
	msgs   chan *trellisv1.AttachRequest
	end    chan error
}

func (f *fakeApprovals) Attach(stream grpc.BidiStreamingServer[trellisv1.AttachRequest, trellisv1.AttachResponse]) error {
	if f.refuse {
		return status.Error(codes.Unimplemented, "no approvals here")
	}
	a := &fakeAttach{stream: stream, msgs: make(chan *trellisv1.AttachRequest, 64), end: make(chan error, 1)}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				close(a.msgs)
				return
			}
			a.msgs <- m
		}
	}()
	f.streams <- a
	select {
	case err := <-a.end:
		return err
	case <-stream.Context().Done():
		return nil
	}
}

func (a *fakeAttach) next(t *testing.T) *trellisv1.AttachRequest {
	t.Helper()
	select {
	case m, ok := <-a.msgs:
		if !ok {
			t.Fatal("the facade's Attach stream ended")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message from the facade on its Attach stream")
	}
	return nil
}

// starts reads n start messages and returns their origins, sorted.
func (a *fakeAttach) starts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		m := a.next(t)
		if m.GetStart() == nil {
			t.Fatalf("message %v, want a start", m)
		}
		out = append(out, m.GetStart().GetOriginId())
	}
	slices.Sort(out)
	return out
}

func (a *fakeAttach) send(t *testing.T, m *trellisv1.AttachResponse) {
	t.Helper()
	if err := a.stream.Send(m); err != nil {
		t.Fatal(err)
	}
}

func ready(origin string) *trellisv1.AttachResponse {
	return &trellisv1.AttachResponse{OriginId: origin, Msg: &trellisv1.AttachResponse_Ready{Ready: &trellisv1.AttachReady{OriginId: origin}}}
}

// newApprovalsFacade is a facade Server whose runtime is fake, over bufconn.
func newApprovalsFacade(t *testing.T, fake *fakeApprovals) *Server {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	trellisv1.RegisterApprovalServiceServer(gs, fake)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	s := NewServer(Options{Conn: cc, Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(s.Close)
	return s
}

// approvingConn is an authenticated connection of s whose client answers
// every approval.request with decision.
func approvingConn(t *testing.T, s *Server, id, decision string) *wsConn {
	t.Helper()
	server, client := jsonrpctest.Pipe()
	c := &wsConn{s: s, log: s.opts.Log, id: id, subs: map[string]*feed{}}
	c.rpc = jsonrpc.NewConn(server, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, nil
	}), jsonrpc.Options{Log: s.opts.Log})
	c.authed.Store(true)
	go func() { _ = c.rpc.Serve(context.Background()) }()
	cl := jsonrpc.NewConn(client, jsonrpc.HandlerFunc(func(_ context.Context, _ *jsonrpc.Conn, method string, _ json.RawMessage) (any, *jsonrpc.Error) {
		return map[string]any{"decision": decision}, nil
	}), jsonrpc.Options{Log: s.opts.Log})
	go func() { _ = cl.Serve(context.Background()) }()
	t.Cleanup(func() { _ = cl.Close() })
	return c
}

// TestApprovalsOneStreamReopened: two connections share one Attach stream;
// after it fails the facade reopens it with a start for each origin still
// attached, routes a request to its origin's connection and sends the
// answer back, and a closed connection's origin is detached.
func TestApprovalsOneStreamReopened(t *testing.T) {
	fake := &fakeApprovals{streams: make(chan *fakeAttach, 4)}
	s := newApprovalsFacade(t, fake)
	c1, c2 := approvingConn(t, s, "c-1", "allow"), approvingConn(t, s, "c-2", "deny")
	approvingConn(t, s, "c-idle", "allow") // never acts on a session: no origin, nothing sent

	done := make(chan struct{})
	go func() { c1.ensureApprover(); c2.ensureApprover(); close(done) }()
	first := <-fake.streams
	if got := first.starts(t, 1); got[0] != "c-1" {
		t.Fatalf("first start for %v, want c-1", got)
	}
	first.send(t, ready("c-1"))
	if got := first.starts(t, 1); got[0] != "c-2" {
		t.Fatalf("second start for %v, want c-2", got)
	}
	first.send(t, ready("c-2"))
	<-done
	if streams, origins := s.approvals.stats(); streams != 1 || origins != 2 {
		t.Fatalf("stats = %d streams, %d origins; want 1 stream carrying 2", streams, origins)
	}

	// The stream fails: the facade opens another and starts both again.
	first.end <- status.Error(codes.Unavailable, "runtime restarting")
	second := <-fake.streams
	if got := second.starts(t, 2); !slices.Equal(got, []string{"c-1", "c-2"}) {
		t.Fatalf("starts on the reopened stream: %v, want c-1 and c-2", got)
	}
	second.send(t, ready("c-1"))
	second.send(t, ready("c-2"))

	// Each request reaches its own origin's connection (c-1 allows, c-2 denies).
	for _, tc := range []struct{ origin, id, decision string }{{"c-2", "ap-2", "deny"}, {"c-1", "ap-1", "allow"}} {
		second.send(t, &trellisv1.AttachResponse{OriginId: tc.origin, Msg: &trellisv1.AttachResponse_Request{
			Request: &trellisv1.ApprovalRequest{RequestId: tc.id, SessionId: "s-" + tc.origin, Tool: "shell"}}})
		m := second.next(t)
		if d := m.GetDecision(); d.GetRequestId() != tc.id || d.GetReply().GetDecision() != tc.decision {
			t.Fatalf("answer to %s = %v, want %s from %s", tc.id, m, tc.decision, tc.origin)
		}
	}

	// A closed connection's origin is detached; the stream stays.
	_ = c1.rpc.Close()
	if m := second.next(t); m.GetDetach().GetOriginId() != "c-1" {
		t.Fatalf("after c-1 closed: %v, want detach{c-1}", m)
	}
	if streams, origins := s.approvals.stats(); streams != 2 || origins != 1 {
		t.Fatalf("stats = %d streams, %d origins; want 2 opened, 1 origin", streams, origins)
	}

	// The runtime ends c-2's approver: the connection attaches again on its
	// next session call.
	second.send(t, &trellisv1.AttachResponse{OriginId: "c-2", Msg: &trellisv1.AttachResponse_Detached{Detached: &trellisv1.AttachDetach{OriginId: "c-2"}}})
	go func() {
		for m := range second.msgs {
			if m.GetStart().GetOriginId() == "c-2" {
				_ = second.stream.Send(ready("c-2"))
				return
			}
		}
	}()
	c2.ensureApprover()
	if streams, origins := s.approvals.stats(); streams != 2 || origins != 1 {
		t.Fatalf("stats = %d streams, %d origins after c-2 attached again; want 2, 1", streams, origins)
	}
}

// TestApprovalsUnimplemented: a runtime without approvals answers
// Unimplemented once; the facade does not wait for a ready or retry.
func TestApprovalsUnimplemented(t *testing.T) {
	fake := &fakeApprovals{streams: make(chan *fakeAttach, 1), refuse: true}
	s := newApprovalsFacade(t, fake)
	c1 := approvingConn(t, s, "c-1", "allow")
	c1.ensureApprover() // returns once the stream is refused, not after the ready timeout
	c2 := approvingConn(t, s, "c-2", "allow")
	c2.ensureApprover()
	if streams, origins := s.approvals.stats(); streams != 1 || origins != 0 {
		t.Fatalf("stats = %d streams, %d origins; want the one refused stream and no origin", streams, origins)
	}
}

// TestApprovalsConcurrentConnections: connections attaching and closing at
// once share the one stream; every start gets its ready, every close its
// detach, each after its start, and no origin is left behind.
func TestApprovalsConcurrentConnections(t *testing.T) {
	const n = 50
	fake := &fakeApprovals{streams: make(chan *fakeAttach, 1)}
	s := newApprovalsFacade(t, fake)
	conns := make([]*wsConn, n)
	for i := range conns {
		conns[i] = approvingConn(t, s, fmt.Sprintf("c-%d", i), "allow")
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.ensureApprover()
			_ = c.rpc.Close()
		}()
	}
	stream := <-fake.streams
	started, detached := map[string]bool{}, map[string]bool{}
	for len(detached) < n {
		m := stream.next(t)
		switch {
		case m.GetStart() != nil:
			o := m.GetStart().GetOriginId()
			if started[o] {
				t.Fatalf("two starts for %s", o)
			}
			started[o] = true
			stream.send(t, ready(o))
		case m.GetDetach() != nil:
			o := m.GetDetach().GetOriginId()
			if !started[o] || detached[o] {
				t.Fatalf("detach of %s: started %v, detached before %v", o, started[o], detached[o])
			}
			detached[o] = true
		default:
			t.Fatalf("unexpected message %v", m)
		}
	}
	wg.Wait()
	if streams, origins := s.approvals.stats(); streams != 1 || origins != 0 {
		t.Fatalf("stats = %d streams, %d origins; want 1 stream, none left", streams, origins)
	}
}

// TestApprovalsReadyLate: a connection waits for its origin's ready once,
// bounded; its later session calls do not wait again, and the ready that
// comes late attaches it.
func TestApprovalsReadyLate(t *testing.T) {
	fake := &fakeApprovals{streams: make(chan *fakeAttach, 1)}
	s := newApprovalsFacade(t, fake)
	s.approvals.readyTimeout = 10 * time.Millisecond
	c := approvingConn(t, s, "c-1", "allow")
	c.ensureApprover() // no ready: returns after the bound
	stream := <-fake.streams
	if got := stream.starts(t, 1); got[0] != "c-1" {
		t.Fatalf("start for %v, want c-1", got)
	}
	if ready, _ := s.approvals.add(c); ready != nil {
		t.Fatal("a later call would wait for the ready again")
	}
	if _, origins := s.approvals.stats(); origins != 0 {
		t.Fatalf("%d origins attached before any ready, want 0", origins)
	}
	stream.send(t, ready("c-1"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, origins := s.approvals.stats(); origins == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late ready did not attach the origin")
		}
	}
	if m := stream.nextOrNone(); m != nil {
		t.Fatalf("unexpected message %v: the origin was started once", m)
	}
}

// nextOrNone returns a message the facade already sent, or nil.
func (a *fakeAttach) nextOrNone() *trellisv1.AttachRequest {
	select {
	case m := <-a.msgs:
		return m
	default:
		return nil
	}
}

// recordingConn is an authenticated connection of s whose client notes, in
// the order it reads them, each session.event's seq ("e<seq>") and each
// approval.request ("ask"), and allows every request.
func recordingConn(t *testing.T, s *Server, id string) (*wsConn, func() []string) {
	t.Helper()
	server, client := jsonrpctest.Pipe()
	c := &wsConn{s: s, log: s.opts.Log, id: id, subs: map[string]*feed{}}
	c.rpc = jsonrpc.NewConn(server, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, nil
	}), jsonrpc.Options{Log: s.opts.Log})
	c.authed.Store(true)
	go func() { _ = c.rpc.Serve(context.Background()) }()
	var mu sync.Mutex
	var seen []string
	cl := jsonrpc.NewConn(client, jsonrpc.HandlerFunc(func(_ context.Context, _ *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
		mu.Lock()
		defer mu.Unlock()
		if method == "session.event" {
			var ev struct{ Seq int64 }
			_ = json.Unmarshal(params, &ev)
			seen = append(seen, fmt.Sprintf("e%d", ev.Seq))
			return nil, nil
		}
		seen = append(seen, "ask")
		return map[string]any{"decision": "allow"}, nil
	}), jsonrpc.Options{Log: s.opts.Log, OrderedNotifications: true})
	go func() { _ = cl.Serve(context.Background()) }()
	t.Cleanup(func() { _ = cl.Close() })
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func eventFrame(seq int64) []byte {
	return jsonrpc.NotificationFrame("session.event", fmt.Appendf(nil, `{"sessionId":"s-1","seq":%d,"kind":"usage","payload":{},"ts":"2026-12-05T00:00:00Z"}`, seq))
}

// TestApprovalRequestFollowsItsEvents: the runtime's approval request and
// the session's events come to the facade on different streams; the
// request (after_seq 5) reaches the client after the events up to seq 5
// that its connection is given, whether it reads the session live, on a
// private stream, or stops watching it; a session it does not watch holds
// nothing back.
func TestApprovalRequestFollowsItsEvents(t *testing.T) {
	s := newApprovalsFacade(t, &fakeApprovals{streams: make(chan *fakeAttach, 1)})
	ready := make(chan struct{})
	close(ready)
	req := &trellisv1.ApprovalRequest{RequestId: "ap-1", SessionId: "s-1", Tool: "shell"}
	for _, tc := range []struct {
		name    string
		watch   bool
		deliver func(f *feed, c *wsConn)
		want    []string
	}{
		{"live", true, func(f *feed, c *wsConn) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.offer(4, eventFrame(4), false)
			f.offer(5, eventFrame(5), false)
			f.settle()
		}, []string{"e4", "e5", "ask"}},
		{"catching up", true, func(f *feed, c *wsConn) {
			// Fell behind, as offer leaves it: reads on its own.
			f.mu.Lock()
			delete(f.watchers, c)
			f.mu.Unlock()
			if err := c.rpc.SendFrames(context.Background(), [][]byte{eventFrame(4), eventFrame(5)}); err != nil {
				t.Error(err)
			}
			f.progressed(c, 5)
		}, []string{"e4", "e5", "ask"}},
		{"unwatched meanwhile", true, func(f *feed, c *wsConn) { c.unwatchClosed("s-1") }, []string{"ask"}},
		{"not watched", false, nil, []string{"ask"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, seen := recordingConn(t, s, "c-"+tc.name)
			f := &feed{h: s.hub, id: "s-1", ready: ready, refs: 2, ctx: context.Background(), cancel: func() {}, last: 3, watchers: map[*wsConn]int64{c: 3}}
			if tc.watch {
				c.subs["s-1"] = f
			}
			asked := make(chan *trellisv1.AttachDecision, 1)
			go func() {
				c.awaitEvents(t.Context(), "s-1", 5)
				asked <- c.ask(t.Context(), req)
			}()
			if tc.deliver != nil {
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					f.mu.Lock()
					n := len(f.waits)
					f.mu.Unlock()
					if n == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the request did not wait for the session's events")
					}
				}
				tc.deliver(f, c)
			}
			if d := <-asked; d.GetReply().GetDecision() != "allow" {
				t.Fatalf("decision = %v, want allow", d)
			}
			if got := seen(); !slices.Equal(got, tc.want) {
				t.Fatalf("the client read %v, want %v", got, tc.want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.waits) != 0 {
				t.Fatalf("%d waits left on the feed", len(f.waits))
			}
		})
	}
}
