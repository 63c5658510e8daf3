package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// TestApprovalAttachTwoOriginsOverGRPC: one Attach stream carries the
// origins of two gRPC clients, each of which created a session with its
// trellis-origin. Each approval request arrives tagged with its origin, a
// decision resolves the request it names, and detaching one origin with a
// request pending denies that request (as when an approver's stream ends)
// while the other origin keeps working on the same stream.
func TestApprovalAttachTwoOriginsOverGRPC(t *testing.T) {
	d := startDaemon(t)
	c1, c2 := dialGRPC(t, d), dialGRPC(t, d)
	c1.origin, c2.origin = "grpc-origin-1", "grpc-origin-2"
	ctx, cancel := context.WithCancel(c1.outgoing(context.Background()))
	defer cancel()
	stream, err := trellisv1.NewApprovalServiceClient(c1.conn).Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := func() *trellisv1.AttachResponse {
		t.Helper()
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	for _, origin := range []string{c1.origin, c2.origin} {
		if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Start{Start: &trellisv1.AttachStart{OriginId: origin}}}); err != nil {
			t.Fatal(err)
		}
		if msg := recv(); msg.GetReady().GetOriginId() != origin || msg.GetOriginId() != origin {
			t.Fatalf("answer to start{%s} = %v", origin, msg)
		}
	}
	id1, id2 := createSession(t, c1, nil), createSession(t, c2, nil)
	// nextRequest skips resolutions and returns the next request.
	nextRequest := func() *trellisv1.AttachResponse {
		t.Helper()
		for {
			if msg := recv(); msg.GetRequest() != nil {
				return msg
			}
		}
	}
	decide := func(requestID, decision string) {
		t.Helper()
		if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Decision{Decision: &trellisv1.AttachDecision{
			RequestId: requestID, Reply: &trellisv1.ApprovalReply{Decision: decision}}}}); err != nil {
			t.Fatal(err)
		}
	}
	toolResult := func(c client, id string) map[string]any {
		t.Helper()
		res := findKind(collect(t, c.Events(id), "turn.done", 1), "tool.result")
		if len(res) != 1 {
			t.Fatalf("session %s: tool results %v, want 1", id, res)
		}
		return res[0]
	}

	// Each origin's request is tagged with it; c1's is allowed, c2's denied.
	for _, tc := range []struct {
		c        *grpcClient
		session  string
		decision string
		ok       bool
	}{{c1, id1, "allow", true}, {c2, id2, "deny", false}} {
		if err := tc.c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": tc.session, "text": "run ls"}, nil); err != nil {
			t.Fatal(err)
		}
		msg := nextRequest()
		if msg.GetOriginId() != tc.c.origin || msg.GetRequest().GetSessionId() != tc.session {
			t.Fatalf("request %v, want session %s's tagged %s", msg, tc.session, tc.c.origin)
		}
		decide(msg.GetRequest().GetRequestId(), tc.decision)
		if r := toolResult(tc.c, tc.session); r["ok"] != tc.ok {
			t.Fatalf("session %s after %s: %v", tc.session, tc.decision, r)
		}
	}

	// Detach c1's origin while its request waits: denied as an ended
	// approver's; c2's origin keeps answering on the stream.
	if err := c1.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id1, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	if msg := nextRequest(); msg.GetOriginId() != c1.origin {
		t.Fatalf("request %v, want one tagged %s", msg, c1.origin)
	}
	if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Detach{Detach: &trellisv1.AttachDetach{OriginId: c1.origin}}}); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c1.Events(id1), "turn.done", 1)
	if e := findKind(evs, "error"); len(e) != 1 || e[0]["code"] != "approval_denied" {
		t.Fatalf("after the detach of its origin: errors %v, want approval_denied", e)
	}
	if err := c2.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id2, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	msg := nextRequest()
	if msg.GetOriginId() != c2.origin || msg.GetRequest().GetSessionId() != id2 {
		t.Fatalf("request %v, want session %s's tagged %s", msg, id2, c2.origin)
	}
	decide(msg.GetRequest().GetRequestId(), "allow")
	if r := toolResult(c2, id2); r["ok"] != true {
		t.Fatalf("session %s after allow: %v", id2, r)
	}
}

// TestApprovalOneAttachForManyConnections: N WebSocket connections acting
// on sessions share the facade's one upstream Attach stream, each gets only
// its own approval.request, an idle connection adds nothing, and a closed
// connection's origin leaves the stream.
func TestApprovalOneAttachForManyConnections(t *testing.T) {
	const n = 6
	d := startDaemon(t)
	idle := helloWS(t, d) // authenticated, never acts on a session
	_ = idle
	metric := func(name string) float64 { return value(scrape(t, d), name, nil) }
	if s := metric("trellis_approver_streams_opened_total"); s != 0 {
		t.Fatalf("approver streams before any session call = %v, want 0", s)
	}
	type conn struct {
		c  *wsClient
		a  *approver
		id string
	}
	conns := make([]conn, n)
	for i := range conns {
		c := helloWS(t, d)
		a := &approver{reply: map[string]any{"decision": "allow"}}
		c.onRequest = a.handle
		conns[i] = conn{c: c, a: a, id: createSession(t, c, map[string]any{"workdir": t.TempDir(), "mode": "accept"})}
	}
	if s, o := metric("trellis_approver_streams_opened_total"), metric("trellis_approver_origins"); s != 1 || o != n {
		t.Fatalf("approver streams opened = %v, origins = %v; want 1 stream carrying %d origins", s, o, n)
	}
	for _, cn := range conns {
		if err := cn.c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": cn.id, "text": "run ls"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, cn := range conns {
		res := findKind(collect(t, cn.c.Events(cn.id), "turn.done", 1), "tool.result")
		if len(res) != 1 || res[0]["ok"] != true {
			t.Fatalf("connection %d: tool results %v", i, res)
		}
		cn.a.mu.Lock()
		asked := fmt.Sprint(cn.a.asked)
		ok := len(cn.a.asked) == 1 && cn.a.asked[0]["sessionId"] == cn.id
		cn.a.mu.Unlock()
		if !ok {
			t.Fatalf("connection %d was asked %s, want only its own session %s's request", i, asked, cn.id)
		}
	}

	// A closed connection's origin leaves the stream; the stream stays.
	conns[0].c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for metric("trellis_approver_origins") != n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("origins = %v after a close, want %d", metric("trellis_approver_origins"), n-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := metric("trellis_approver_streams_opened_total"); s != 1 {
		t.Fatalf("approver streams opened = %v, want still 1", s)
	}
}

// approverConns is how many connections TestApprovalAttachGoroutinesPerConnection
// attaches as approvers.
const approverConns = 200

// maxApproverGoroutines bounds what attaching approverConns connections as
// approvers may cost in all in this (in-process) daemon: the facade's one
// stream (its reader and sender, gRPC's stream goroutines) and, in the
// runtime, that stream's handler, its reader and its approver group's
// queue (a goroutine while events wait) — nothing per connection. A stream
// per connection cost 5 each (1,000 for 200), and per-origin mailboxes on a
// shared stream 2 each.
const maxApproverGoroutines = 20

// TestApprovalAttachGoroutinesPerConnection: 200 authenticated connections
// each create or resume a session (so each is attached as its origin's
// approver, and watches it); the goroutines this adds are logged and bounded in all (none
// per connection), and the facade holds one Attach stream for all of them.
func TestApprovalAttachGoroutinesPerConnection(t *testing.T) {
	d := startDaemon(t)
	conns := make([]*wsClient, approverConns)
	for i := range conns {
		conns[i] = helloWS(t, d)
	}
	// A session made over gRPC: no facade approver stream yet.
	id := createSession(t, dialGRPC(t, d), nil)
	idle := goroutinesSettled(func(int) bool { return true })
	for _, c := range conns {
		var res map[string]any
		if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
			t.Fatal(err)
		}
	}
	attached := goroutinesSettled(func(int) bool { return true }) - idle
	fams := scrape(t, d)
	streams, origins := value(fams, "trellis_approver_streams_opened_total", nil), value(fams, "trellis_approver_origins", nil)
	t.Logf("%d connections attached as approvers: %d goroutines above idle (%.2f each), %v Attach stream(s), %v origins",
		approverConns, attached, float64(attached)/approverConns, streams, origins)
	if streams != 1 || origins != approverConns {
		t.Fatalf("%v Attach streams carrying %v origins, want 1 carrying %d", streams, origins, approverConns)
	}
	if attached > maxApproverGoroutines {
		t.Errorf("%d goroutines for %d approvers, over %d in all", attached, approverConns, maxApproverGoroutines)
	}
}
