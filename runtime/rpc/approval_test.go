package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// approvalEnv is a real gRPC server on 127.0.0.1:0 serving ApprovalService
// over a broker on a real SQLite store, and a client connected to it.
type approvalEnv struct {
	broker *approval.Broker
	srv    *ApprovalServer
	client trellisv1.ApprovalServiceClient

	mu      sync.Mutex
	origins map[string]string // session → origin, as session.Service.Origin
}

func (e *approvalEnv) setOrigin(sessionID, origin string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.origins[sessionID] = origin
}

func (e *approvalEnv) origin(sessionID string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.origins[sessionID]
}

func newApprovalEnv(t *testing.T, opts ...ApprovalServerOptions) *approvalEnv {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := &approvalEnv{origins: map[string]string{}}
	e.broker = approval.NewBroker(st, e.origin, nil, approval.BrokerOptions{})
	t.Cleanup(e.broker.Close)
	var o ApprovalServerOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	e.srv = NewApprovalServer(e.broker, approval.NewAllowlist(st, nil), o)

	// No auth here; the error mapping is the daemon's, so codes and reasons
	// are what clients see.
	i := interceptors{log: slog.New(slog.DiscardHandler)}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(i.mapErrorsUnary), grpc.ChainStreamInterceptor(i.mapErrorsStream))
	trellisv1.RegisterApprovalServiceServer(gs, e.srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.client = trellisv1.NewApprovalServiceClient(conn)
	return e
}

func approvalQuestion(sessionID string) approval.Question {
	return approval.Question{
		SessionID: sessionID, Workdir: "/work/proj", Mode: "accept", Kind: "chat",
		TurnID: "t-1", CallID: "call-1", Tool: "shell",
		Args: json.RawMessage(`{"command":"git status --short"}`), Tag: approval.TagExec,
	}
}

func (e *approvalEnv) ask(q approval.Question) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- e.broker.Ask(context.Background(), q) }()
	return ch
}

func approvalResult(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Ask did not return")
	}
	return nil
}

// attachApprover opens an Attach stream for origin and waits for ready.
func (e *approvalEnv) attachApprover(t *testing.T, ctx context.Context, origin, clientID string) grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse] {
	t.Helper()
	stream, err := e.client.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := &trellisv1.AttachStart{OriginId: origin}
	if clientID != "" {
		start.ClientId = &clientID
	}
	if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Start{Start: start}}); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if msg.GetReady().GetOriginId() != origin {
		t.Fatalf("first message = %v, want ready{%s}", msg, origin)
	}
	return stream
}

func sendDecision(t *testing.T, stream grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], d *trellisv1.AttachDecision) {
	t.Helper()
	if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Decision{Decision: d}}); err != nil {
		t.Fatal(err)
	}
}

// wantStatus checks a gRPC error's code and its ErrorInfo reason.
func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want gRPC code %s", err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.GetReason() != reason {
				t.Fatalf("ErrorInfo reason = %q, want %q (%v)", info.GetReason(), reason, err)
			}
			return
		}
	}
	t.Fatalf("error %v carries no ErrorInfo", err)
}

func TestApprovalAttachApprovesOverGRPC(t *testing.T) {
	// The request names the seq of its session's last stored event.
	e := newApprovalEnv(t, ApprovalServerOptions{LastSeq: func(_ context.Context, id string) (int64, error) {
		if id != "s-1" {
			return 0, fmt.Errorf("no session %s", id)
		}
		return 41, nil
	}})
	stream := e.attachApprover(t, t.Context(), "c-1", "")
	if n := e.srv.Attached(); n != 1 {
		t.Errorf("Attached = %d, want 1", n)
	}
	e.setOrigin("s-1", "c-1")
	errc := e.ask(approvalQuestion("s-1"))

	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	req := msg.GetRequest()
	if req == nil || !strings.HasPrefix(req.GetRequestId(), "ap-") || req.GetSessionId() != "s-1" ||
		req.GetTool() != "shell" || req.GetArgs().GetFields()["command"].GetStringValue() != "git status --short" ||
		req.GetPermissionTag() != "exec" || req.GetRisk() != "high" || req.GetTimeoutSec() != 300 ||
		req.GetPattern() != "shell(git status*)" || req.GetScopeHint() != "project" || req.GetTurnId() != "t-1" || req.GetCallId() != "call-1" {
		t.Fatalf("request = %v", msg)
	}
	if msg.GetAfterSeq() != 41 {
		t.Fatalf("after_seq = %d, want 41, the session's last stored event", msg.GetAfterSeq())
	}
	scope := "session"
	sendDecision(t, stream, &trellisv1.AttachDecision{RequestId: req.GetRequestId(),
		Reply: &trellisv1.ApprovalReply{Decision: "allow", Scope: &scope}})
	if err := approvalResult(t, errc); err != nil {
		t.Fatalf("Ask = %v, want nil", err)
	}
	msg, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if res := msg.GetResolved(); res.GetRequestId() != req.GetRequestId() || res.GetDecision() != "allow" || res.GetBy() != "c-1" {
		t.Fatalf("resolved = %v, want allow by c-1", msg)
	}
	list, err := e.client.ListAllowlistPatterns(t.Context(), &trellisv1.ListAllowlistPatternsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetPatterns()) != 1 || list.GetPatterns()[0].GetPattern() != "shell(git status*)" ||
		list.GetPatterns()[0].GetScope() != "session" {
		t.Fatalf("patterns = %v, want the session entry the answer added", list)
	}
}

func TestApprovalAttachDenials(t *testing.T) {
	tests := []struct {
		name    string
		answer  func(t *testing.T, stream grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], id string, cancel func())
		wantMsg string
	}{
		{"deny", func(t *testing.T, s grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], id string, _ func()) {
			reason := "not now"
			sendDecision(t, s, &trellisv1.AttachDecision{RequestId: id, Reply: &trellisv1.ApprovalReply{Decision: "deny", Reason: &reason}})
		}, "denied by c-1: not now"},
		{"error reply", func(t *testing.T, s grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], id string, _ func()) {
			msg := "the prompt crashed"
			sendDecision(t, s, &trellisv1.AttachDecision{RequestId: id, Error: &msg})
		}, "the prompt crashed"},
		{"invalid answer", func(t *testing.T, s grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], id string, _ func()) {
			sendDecision(t, s, &trellisv1.AttachDecision{RequestId: id, Reply: &trellisv1.ApprovalReply{Decision: "maybe"}})
		}, "the answer was invalid"},
		{"stream ends", func(t *testing.T, _ grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], _ string, cancel func()) {
			cancel()
		}, "the approving connection went away"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newApprovalEnv(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stream := e.attachApprover(t, ctx, "c-1", "")
			e.setOrigin("s-1", "c-1")
			errc := e.ask(approvalQuestion("s-1"))
			msg, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			tt.answer(t, stream, msg.GetRequest().GetRequestId(), cancel)
			err = approvalResult(t, errc)
			if errs.CodeOf(err) != errcode.ApprovalDenied || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Ask = %v, want approval_denied saying %q", err, tt.wantMsg)
			}
		})
	}
}

func TestApprovalAttachNeedsStartFirst(t *testing.T) {
	e := newApprovalEnv(t)
	for _, first := range []*trellisv1.AttachRequest{
		{Msg: &trellisv1.AttachRequest_Decision{Decision: &trellisv1.AttachDecision{RequestId: "ap-1"}}},
		{Msg: &trellisv1.AttachRequest_Start{Start: &trellisv1.AttachStart{}}},
	} {
		stream, err := e.client.Attach(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(first); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		wantStatus(t, err, codes.InvalidArgument, errcode.InvalidParams)
	}
	if n := e.srv.Attached(); n != 0 {
		t.Errorf("Attached = %d after refused streams, want 0", n)
	}
}

func TestApprovalQueueOverGRPC(t *testing.T) {
	e := newApprovalEnv(t)
	watch, err := e.client.WatchQueue(t.Context(), &trellisv1.WatchQueueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil { // the watcher is registered
		t.Fatal(err)
	}
	errc := e.ask(approvalQuestion("s-1")) // no origin attached: the unattended queue
	msg, err := watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	pending := msg.GetPending().GetRequest()
	if pending.GetRequestId() == "" || pending.GetPattern() != "shell(git status*)" {
		t.Fatalf("first queue message = %v, want approval.pending", msg)
	}
	list, err := e.client.ListApprovals(t.Context(), &trellisv1.ListApprovalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRequests()) != 1 || list.GetRequests()[0].GetRequestId() != pending.GetRequestId() {
		t.Fatalf("ListApprovals = %v, want the pending request", list)
	}
	// A gRPC caller without trellis-origin answers as "grpc": fine for the queue.
	if _, err := e.client.RespondApproval(t.Context(), &trellisv1.RespondApprovalRequest{
		RequestId: pending.GetRequestId(), Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	if err := approvalResult(t, errc); err != nil {
		t.Fatalf("Ask = %v, want nil", err)
	}
	msg, err = watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if res := msg.GetResolved(); res.GetRequestId() != pending.GetRequestId() || res.GetBy() != GRPCCaller {
		t.Fatalf("queue message = %v, want resolved by grpc", msg)
	}
}

func TestApprovalRespondErrors(t *testing.T) {
	e := newApprovalEnv(t)
	stream := e.attachApprover(t, t.Context(), "c-1", "")
	e.setOrigin("s-1", "c-1")
	errc := e.ask(approvalQuestion("s-1"))
	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := msg.GetRequest().GetRequestId()
	as := func(origin string) context.Context {
		if origin == "" {
			return t.Context()
		}
		return metadata.AppendToOutgoingContext(t.Context(), MDOrigin, origin)
	}
	tests := []struct {
		name, origin, id, decision string
		code                       codes.Code
		reason                     string
	}{
		{"no origin: not the origin", "", id, "allow", codes.PermissionDenied, errcode.Unauthorized},
		{"another connection", "c-2", id, "allow", codes.PermissionDenied, errcode.Unauthorized},
		{"bad decision", "c-1", id, "maybe", codes.InvalidArgument, errcode.InvalidParams},
		{"unknown id", "c-1", "ap-none", "allow", codes.NotFound, errcode.NotFound},
		{"no id", "c-1", "", "allow", codes.InvalidArgument, errcode.InvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.client.RespondApproval(as(tt.origin), &trellisv1.RespondApprovalRequest{RequestId: tt.id, Decision: tt.decision})
			wantStatus(t, err, tt.code, tt.reason)
		})
	}
	// The origin may also answer with RespondApproval instead of its stream.
	if _, err := e.client.RespondApproval(as("c-1"), &trellisv1.RespondApprovalRequest{RequestId: id, Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	if err := approvalResult(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestApprovalAllowlistOverGRPC(t *testing.T) {
	e := newApprovalEnv(t)
	ctx := t.Context()
	wd := t.TempDir()
	add, err := e.client.AddAllowlistPattern(ctx, &trellisv1.AddAllowlistPatternRequest{Pattern: "write_file(src/**)", Workdir: &wd})
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.client.ListAllowlistPatterns(ctx, &trellisv1.ListAllowlistPatternsRequest{Workdir: &wd})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetPatterns()) != 1 {
		t.Fatalf("patterns = %v", list)
	}
	p := list.GetPatterns()[0]
	if p.GetPatternId() != add.GetPatternId() || p.GetScope() != "project" || p.GetWorkdir() != wd {
		t.Errorf("pattern = %v, want the project entry of %s", p, wd)
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", p.GetCreatedAt()); err != nil || !strings.HasSuffix(p.GetCreatedAt(), "Z") {
		t.Errorf("createdAt %q is not RFC3339 UTC with milliseconds", p.GetCreatedAt())
	}
	if _, err := e.client.RemoveAllowlistPattern(ctx, &trellisv1.RemoveAllowlistPatternRequest{PatternId: add.GetPatternId()}); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.RemoveAllowlistPattern(ctx, &trellisv1.RemoveAllowlistPatternRequest{PatternId: add.GetPatternId()})
	wantStatus(t, err, codes.NotFound, errcode.NotFound)
	_, err = e.client.AddAllowlistPattern(ctx, &trellisv1.AddAllowlistPatternRequest{Pattern: "shell(git"})
	wantStatus(t, err, codes.InvalidArgument, errcode.InvalidParams)
	bad := "forever"
	_, err = e.client.ListAllowlistPatterns(ctx, &trellisv1.ListAllowlistPatternsRequest{Scope: &bad})
	wantStatus(t, err, codes.InvalidArgument, errcode.InvalidParams)
}

func TestApprovalAttachRebindsTheClient(t *testing.T) {
	type call struct {
		old []string
		new string
	}
	calls := make(chan call, 4)
	e := newApprovalEnv(t, ApprovalServerOptions{Rebind: func(old []string, newOrigin string) int {
		calls <- call{old, newOrigin}
		return 1
	}})
	ctx1, end1 := context.WithCancel(t.Context())
	e.attachApprover(t, ctx1, "c-1", "client-a")
	end1()
	e.attachApprover(t, t.Context(), "c-2", "client-a")
	select {
	case c := <-calls:
		if len(c.old) != 1 || c.old[0] != "c-1" || c.new != "c-2" {
			t.Errorf("rebind(%v, %s), want rebind([c-1], c-2)", c.old, c.new)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second Attach of client-a did not re-bind its sessions")
	}
	if len(calls) != 0 {
		t.Errorf("unexpected extra rebind calls")
	}
}

// addOrigin sends a start for origin on a stream and waits for its ready.
func addOrigin(t *testing.T, stream grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse], origin string) {
	t.Helper()
	if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Start{Start: &trellisv1.AttachStart{OriginId: origin}}}); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if msg.GetReady().GetOriginId() != origin || msg.GetOriginId() != origin {
		t.Fatalf("answer to start{%s} = %v, want ready tagged %s", origin, msg, origin)
	}
}

// TestApprovalAttachMultiplexesOrigins: one Attach stream answers for two
// origins; each request comes tagged with its origin, a decision resolves
// the request it names, and detaching one origin denies its pending request
// (as a stream's end would) while the other keeps working on the stream.
func TestApprovalAttachMultiplexesOrigins(t *testing.T) {
	e := newApprovalEnv(t)
	stream := e.attachApprover(t, t.Context(), "c-1", "")
	addOrigin(t, stream, "c-2")
	addOrigin(t, stream, "c-2") // again: ready again, nothing else
	if n := e.srv.Attached(); n != 2 {
		t.Fatalf("Attached = %d, want 2 (one stream, two origins)", n)
	}
	e.setOrigin("s-1", "c-1")
	e.setOrigin("s-2", "c-2")

	recvRequest := func(origin, session string) *trellisv1.ApprovalRequest {
		t.Helper()
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg.GetRequest().GetSessionId() != session || msg.GetOriginId() != origin {
			t.Fatalf("message = %v, want the request of %s tagged %s", msg, session, origin)
		}
		return msg.GetRequest()
	}
	recvResolved := func(origin, id, decision, by string) {
		t.Helper()
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r := msg.GetResolved(); r.GetRequestId() != id || r.GetDecision() != decision || r.GetBy() != by || msg.GetOriginId() != origin {
			t.Fatalf("message = %v, want %s resolved %s by %s, tagged %s", msg, id, decision, by, origin)
		}
	}

	// Both origins ask; the answers come in the other order.
	err1 := e.ask(approvalQuestion("s-1"))
	req1 := recvRequest("c-1", "s-1")
	err2 := e.ask(approvalQuestion("s-2"))
	req2 := recvRequest("c-2", "s-2")
	sendDecision(t, stream, &trellisv1.AttachDecision{RequestId: req2.GetRequestId(), Reply: &trellisv1.ApprovalReply{Decision: "allow"}})
	if err := approvalResult(t, err2); err != nil {
		t.Fatalf("Ask of s-2 = %v, want nil", err)
	}
	recvResolved("c-2", req2.GetRequestId(), "allow", "c-2")
	reason := "no"
	sendDecision(t, stream, &trellisv1.AttachDecision{RequestId: req1.GetRequestId(), Reply: &trellisv1.ApprovalReply{Decision: "deny", Reason: &reason}})
	if err := approvalResult(t, err1); errs.CodeOf(err) != errcode.ApprovalDenied || !strings.Contains(err.Error(), "denied by c-1: no") {
		t.Fatalf("Ask of s-1 = %v, want denied by c-1", err)
	}
	recvResolved("c-1", req1.GetRequestId(), "deny", "c-1")

	// Detach c-1 with a request pending: it is denied as an ended
	// approver's would be; c-2 keeps answering on the same stream.
	err1 = e.ask(approvalQuestion("s-1"))
	recvRequest("c-1", "s-1")
	if err := stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Detach{Detach: &trellisv1.AttachDetach{OriginId: "c-1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := approvalResult(t, err1); errs.CodeOf(err) != errcode.ApprovalDenied || !strings.Contains(err.Error(), "the approving connection went away") {
		t.Fatalf("Ask of s-1 after its detach = %v, want denied: the approving connection went away", err)
	}
	if n := e.srv.Attached(); n != 1 {
		t.Fatalf("Attached = %d after one detach, want 1", n)
	}
	err2 = e.ask(approvalQuestion("s-2"))
	req2 = recvRequest("c-2", "s-2")
	sendDecision(t, stream, &trellisv1.AttachDecision{RequestId: req2.GetRequestId(), Reply: &trellisv1.ApprovalReply{Decision: "allow"}})
	if err := approvalResult(t, err2); err != nil {
		t.Fatalf("Ask of s-2 after c-1's detach = %v, want nil", err)
	}
	recvResolved("c-2", req2.GetRequestId(), "allow", "c-2")

	// c-1's sessions now ask the unattended queue; adding c-1 again routes
	// them to the stream once more.
	if list := e.broker.List("", ""); len(list) != 0 {
		t.Fatalf("queue = %v, want empty", list)
	}
	addOrigin(t, stream, "c-1")
	err1 = e.ask(approvalQuestion("s-1"))
	req1 = recvRequest("c-1", "s-1")
	sendDecision(t, stream, &trellisv1.AttachDecision{RequestId: req1.GetRequestId(), Reply: &trellisv1.ApprovalReply{Decision: "allow"}})
	if err := approvalResult(t, err1); err != nil {
		t.Fatalf("Ask of s-1 after it attached again = %v, want nil", err)
	}
}

// TestApprovalAttachOriginTakenOver: a start for an origin another stream
// carries moves it; the first stream is told detached for it and keeps its
// other origin.
func TestApprovalAttachOriginTakenOver(t *testing.T) {
	e := newApprovalEnv(t)
	first := e.attachApprover(t, t.Context(), "c-1", "")
	addOrigin(t, first, "c-2")
	second := e.attachApprover(t, t.Context(), "c-2", "")
	msg, err := first.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if msg.GetDetached().GetOriginId() != "c-2" || msg.GetOriginId() != "c-2" {
		t.Fatalf("first stream got %v, want detached{c-2}", msg)
	}
	e.setOrigin("s-1", "c-1")
	e.setOrigin("s-2", "c-2")
	for _, tc := range []struct {
		stream  grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse]
		session string
	}{{first, "s-1"}, {second, "s-2"}} {
		errc := e.ask(approvalQuestion(tc.session))
		msg, err := tc.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg.GetRequest().GetSessionId() != tc.session {
			t.Fatalf("got %v, want the request of %s", msg, tc.session)
		}
		sendDecision(t, tc.stream, &trellisv1.AttachDecision{RequestId: msg.GetRequest().GetRequestId(), Reply: &trellisv1.ApprovalReply{Decision: "allow"}})
		if err := approvalResult(t, errc); err != nil {
			t.Fatalf("Ask of %s = %v", tc.session, err)
		}
	}
}
