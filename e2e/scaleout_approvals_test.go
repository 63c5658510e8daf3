package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// watchQueue opens approval.pending/resolved notifications on c's daemon and
// returns them once the daemon has registered the watcher.
func watchQueue(t *testing.T, c *grpcClient) <-chan *trellisv1.WatchQueueResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(c.outgoing(context.Background()))
	t.Cleanup(cancel)
	stream, err := trellisv1.NewApprovalServiceClient(c.conn).WatchQueue(ctx, &trellisv1.WatchQueueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("watch the approval queue: %v", err)
	}
	out := make(chan *trellisv1.WatchQueueResponse, 64)
	go func() {
		defer close(out)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			out <- m
		}
	}()
	return out
}

// nextQueueNote returns the next pending (resolved=false) or resolved
// notification about a request of session sid (or of request id rid).
func nextQueueNote(t *testing.T, who string, ch <-chan *trellisv1.WatchQueueResponse, resolved bool, rid string) *trellisv1.WatchQueueResponse {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the queue watch ended", who)
			}
			if resolved && m.GetResolved() != nil && (rid == "" || m.GetResolved().GetRequestId() == rid) {
				return m
			}
			if !resolved && m.GetPending() != nil && (rid == "" || m.GetPending().GetRequest().GetRequestId() == rid) {
				return m
			}
		case <-deadline:
			t.Fatalf("%s: no approval.%s within 20 s", who, map[bool]string{true: "resolved", false: "pending"}[resolved])
		}
	}
}

// attachApprover attaches an approver for c's origin on c's daemon and
// returns its stream once ready; it ends with the test.
func attachApprover(t *testing.T, c *grpcClient) grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse] {
	t.Helper()
	ctx, cancel := context.WithCancel(c.outgoing(context.Background()))
	t.Cleanup(cancel)
	approver, err := trellisv1.NewApprovalServiceClient(c.conn).Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	approver.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Start{Start: &trellisv1.AttachStart{OriginId: c.origin}}})
	if r, err := approver.Recv(); err != nil || r.GetReady() == nil {
		t.Fatalf("attach on %s: %v %v", c.origin, r, err)
	}
	return approver
}

func listApprovals(t *testing.T, c *grpcClient, sid string) []string {
	t.Helper()
	var res struct {
		Requests []struct {
			RequestID string `json:"requestId"`
		} `json:"requests"`
	}
	if err := c.Call(context.Background(), "approval.list", map[string]any{"sessionId": sid}, &res); err != nil {
		t.Fatalf("approval.list: %v", err)
	}
	var ids []string
	for _, r := range res.Requests {
		ids = append(ids, r.RequestID)
	}
	return ids
}

// TestPostgresScaleOutApprovals: approvals across 3 daemons on one
// database. A session runs on A; its origin's approver is attached to B:
// the request raised on A reaches B's approver, which answers it there; a
// client of C sees it resolved, and answering it again on C is not_found.
// Then an unattended request of A's session is listed on B, answered on B
// and C at once (exactly one answer wins), and every daemon's watchers see
// it pending and resolved.
func TestPostgresScaleOutApprovals(t *testing.T) {
	_, procs := startCluster(t, 3)
	a, b, c := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info), dialInfo(t, procs[2].info)
	a.origin, b.origin, c.origin = "origin-of-a", "origin-of-b", "origin-of-c"
	ctx := context.Background()

	// B's approver; watchers on every daemon.
	approver := attachApprover(t, b)
	watchA, watchB, watchC := watchQueue(t, a), watchQueue(t, b), watchQueue(t, c)

	// The session is created on A by a client with no approver; B's client
	// resumes it through B, so its origin becomes B's attached approver.
	id := createSession(t, a, nil)
	if err := b.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatalf("session.resume via B: %v", err)
	}
	evs := a.Events(id)
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil); err != nil {
		t.Fatalf("session.prompt via C: %v", err)
	}
	got := make(chan *trellisv1.AttachResponse, 1)
	go func() {
		for {
			r, err := approver.Recv()
			if err != nil {
				close(got)
				return
			}
			if r.GetRequest() != nil {
				got <- r
				return
			}
		}
	}()
	var req *trellisv1.ApprovalRequest
	select {
	case r, ok := <-got:
		if !ok {
			t.Fatal("B's approver stream ended")
		}
		req = r.GetRequest()
	case <-time.After(20 * time.Second):
		t.Fatal("the request raised on A did not reach the approver attached to B")
	}
	if req.GetSessionId() != id || req.GetTool() != "shell" {
		t.Fatalf("request %v", req)
	}
	rid := req.GetRequestId()
	// Listed to its origin on any daemon, to nobody else.
	asB := dialInfo(t, procs[2].info)
	asB.origin = b.origin
	if ids := listApprovals(t, asB, id); len(ids) != 1 || ids[0] != rid {
		t.Fatalf("approval.list on C for B's origin: %v, want [%s]", ids, rid)
	}
	if ids := listApprovals(t, c, id); len(ids) != 0 {
		t.Fatalf("approval.list on C for another origin: %v, want none", ids)
	}
	approver.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Decision{Decision: &trellisv1.AttachDecision{
		RequestId: rid, Reply: &trellisv1.ApprovalReply{Decision: "allow"}}}})
	for who, w := range map[string]<-chan *trellisv1.WatchQueueResponse{"C": watchC, "A": watchA} {
		res := nextQueueNote(t, "watcher on "+who, w, true, rid).GetResolved()
		if res.GetDecision() != "allow" || res.GetBy() != b.origin {
			t.Fatalf("watcher on %s: approval.resolved %v", who, res)
		}
	}
	done := collect(t, evs, "turn.done", 1)
	if r := findKind(done, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("the approved call on A: %v", r)
	}
	if err := asB.Call(ctx, "approval.respond", map[string]any{"requestId": rid, "decision": "deny"}, nil); err == nil || err.StringCode() != "not_found" {
		t.Fatalf("a second answer on C: %v, want not_found", err)
	}

	// Unattended: a session of A whose origin has no approver anywhere.
	id2 := createSession(t, a, nil)
	evs2 := a.Events(id2)
	if err := a.Call(ctx, "session.prompt", map[string]any{"sessionId": id2, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	var rid2 string
	for who, w := range map[string]<-chan *trellisv1.WatchQueueResponse{"A": watchA, "B": watchB, "C": watchC} {
		p := nextQueueNote(t, "watcher on "+who, w, false, "").GetPending().GetRequest()
		if p.GetSessionId() != id2 || (rid2 != "" && p.GetRequestId() != rid2) {
			t.Fatalf("watcher on %s: approval.pending %v", who, p)
		}
		rid2 = p.GetRequestId()
	}
	if ids := listApprovals(t, b, id2); len(ids) != 1 || ids[0] != rid2 {
		t.Fatalf("approval.list on B: %v, want [%s]", ids, rid2)
	}
	var wg sync.WaitGroup
	answers := make([]string, 2)
	for i, cl := range []*grpcClient{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cl.Call(ctx, "approval.respond", map[string]any{"requestId": rid2, "decision": "allow"}, nil); err != nil {
				answers[i] = err.StringCode()
			} else {
				answers[i] = "ok"
			}
		}()
	}
	wg.Wait()
	if !(answers[0] == "ok" && answers[1] == "not_found" || answers[0] == "not_found" && answers[1] == "ok") {
		t.Fatalf("two answers at once on B and C: %v, want one ok and one not_found", answers)
	}
	for who, w := range map[string]<-chan *trellisv1.WatchQueueResponse{"A": watchA, "B": watchB, "C": watchC} {
		if res := nextQueueNote(t, "watcher on "+who, w, true, rid2).GetResolved(); res.GetDecision() != "allow" {
			t.Fatalf("watcher on %s: %v", who, res)
		}
	}
	done = collect(t, evs2, "turn.done", 1)
	if r := findKind(done, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("the call approved through another daemon: %v", r)
	}
	if ids := listApprovals(t, c, ""); len(ids) != 0 {
		t.Fatalf("approval.list after both resolved: %v", ids)
	}
}
