package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/trellis-run/trellis/daemon"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// approver records approval.request params and answers with reply.
type approver struct {
	mu    sync.Mutex
	asked []map[string]any
	reply map[string]any
}

func (a *approver) handle(method string, params json.RawMessage) (any, *errcode.Error) {
	var p map[string]any
	_ = json.Unmarshal(params, &p)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, p)
	if method != "approval.request" {
		return nil, errcode.NewMethodNotFound(method)
	}
	return a.reply, nil
}

func (a *approver) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

func findKind(evs []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["kind"] == kind {
			out = append(out, payloadOf(ev))
		}
	}
	return out
}

func TestApprovalInteractiveDenyAndAllow(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "deny", "reason": "not today"}}
	c.onRequest = a.handle
	ctx := context.Background()
	wd := t.TempDir()
	os.WriteFile(filepath.Join(wd, "marker.txt"), []byte("x"), 0o644)
	id := createSession(t, c, map[string]any{"workdir": wd, "mode": "accept"})

	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	if a.count() != 1 {
		t.Fatalf("asked %d times, want 1", a.count())
	}
	req := a.asked[0]
	if req["sessionId"] != id || req["tool"] != "shell" || req["requestId"] == "" || req["permissionTag"] != "exec" {
		t.Fatalf("approval.request params: %v", req)
	}
	if _, ok := req["requestId"].(string); !ok {
		t.Fatalf("requestId is not a string: %v", req["requestId"])
	}
	errsEv := findKind(evs, "error")
	results := findKind(evs, "tool.result")
	if len(errsEv) != 1 || errsEv[0]["code"] != "approval_denied" || len(results) != 1 || results[0]["ok"] != false {
		t.Fatalf("deny: errors %v results %v", errsEv, results)
	}
	if len(findKind(evs, "tool.call")) != 0 {
		t.Fatal("a denied call still emitted tool.call")
	}
	if r := findKind(evs, "turn.done")[0]["reason"]; r != "complete" && r != "denied" {
		t.Fatalf("turn after a denial ended %v", r)
	}

	a.reply = map[string]any{"decision": "allow"}
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil)
	evs = collect(t, c.Events(id), "turn.done", 1)
	calls, progress, results := findKind(evs, "tool.call"), findKind(evs, "tool.progress"), findKind(evs, "tool.result")
	if len(calls) != 1 || len(progress) == 0 || len(results) != 1 || results[0]["ok"] != true {
		t.Fatalf("allow: calls %v progress %d results %v", calls, len(progress), results)
	}
	if !strings.Contains(results[0]["output"].(string), "marker.txt") {
		t.Fatalf("ls output lacks the workdir's file: %q", results[0]["output"])
	}
}

func TestApprovalModes(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx := context.Background()
	wd := t.TempDir()
	plan := createSession(t, c, map[string]any{"workdir": wd, "mode": "plan"})
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": plan, "text": "write"}, nil)
	evs := collect(t, c.Events(plan), "turn.done", 1)
	if e := findKind(evs, "error"); len(e) != 1 || e[0]["code"] != "mode_denied" {
		t.Fatalf("plan + write_file: errors %v", e)
	}
	if _, err := os.Stat(filepath.Join(wd, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("plan mode wrote the file")
	}
	auto := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": auto, "text": "run ls"}, nil)
	evs = collect(t, c.Events(auto), "turn.done", 1)
	if r := findKind(evs, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("auto + shell: %v", r)
	}
	if a.count() != 0 {
		t.Fatalf("asked %d times in plan/auto, want 0", a.count())
	}
}

func TestApprovalScopeSession(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow", "scope": "session"}}
	c.onRequest = a.handle
	ctx := context.Background()
	id := createSession(t, c, nil)
	for i := 1; i <= 2; i++ {
		c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil)
		evs := collect(t, c.Events(id), "turn.done", 1)
		if r := findKind(evs, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
			t.Fatalf("turn %d: %v", i, r)
		}
	}
	if a.count() != 1 {
		t.Fatalf("asked %d times, want 1: scope session should allowlist the call", a.count())
	}
}

func TestApprovalUnattendedQueue(t *testing.T) {
	d := startDaemon(t)
	origin := helloWS(t, d)
	other := helloWS(t, d)
	third := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, origin, nil)
	// Close the origin: its approvals go to the unattended queue.
	origin.Close()
	waitConnections(t, other, 2)
	var turn struct{}
	if err := other.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, &turn); err != nil {
		t.Fatal(err)
	}
	pending := waitNote(t, third, "approval.pending")
	req := pending["request"].(map[string]any)
	if req["tool"] != "shell" || req["sessionId"] != id {
		t.Fatalf("approval.pending: %v", pending)
	}
	if err := other.Call(ctx, "approval.respond", map[string]any{"requestId": req["requestId"], "decision": "allow"}, nil); err != nil {
		t.Fatalf("respond: %v", err)
	}
	resolved := waitNote(t, third, "approval.resolved")
	if resolved["requestId"] != req["requestId"] || resolved["decision"] != "allow" {
		t.Fatalf("approval.resolved: %v", resolved)
	}
	evs := collect(t, other.Events(id), "turn.done", 1)
	if r := findKind(evs, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("after respond: %v", r)
	}
	if err := other.Call(ctx, "approval.respond", map[string]any{"requestId": req["requestId"], "decision": "allow"}, nil); err == nil || err.StringCode() != "not_found" {
		t.Fatalf("respond to a finished request: %v, want not_found", err)
	}
}

// waitNote waits for a notification of method on c.
func waitNote(t *testing.T, c *wsClient, method string) map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f := <-c.notes:
			if f.Method == method {
				var p map[string]any
				_ = json.Unmarshal(f.Params, &p)
				return p
			}
		case <-deadline:
			t.Fatalf("no %s within 10 s", method)
		}
	}
}

func TestApprovalNonOriginUnauthorized(t *testing.T) {
	d := startDaemon(t)
	origin := helloWS(t, d)
	held := make(chan string, 1)
	release := make(chan struct{})
	origin.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
		var p map[string]any
		_ = json.Unmarshal(params, &p)
		held <- p["requestId"].(string)
		<-release
		return map[string]any{"decision": "deny"}, nil
	}
	defer close(release)
	other := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, origin, nil)
	origin.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil)
	reqID := <-held
	err := other.Call(ctx, "approval.respond", map[string]any{"requestId": reqID, "decision": "allow"}, nil)
	if err == nil || err.StringCode() != "unauthorized" {
		t.Fatalf("non-origin respond: %v, want unauthorized", err)
	}
	// approval.list shows another connection what it may answer; with
	// includeInteractive, also the request put to the origin, marked.
	for _, tc := range []struct {
		params map[string]any
		want   []any
	}{
		{map[string]any{"sessionId": id}, nil},
		{map[string]any{"sessionId": id, "includeInteractive": false}, nil},
		{map[string]any{"sessionId": id, "includeInteractive": true}, []any{reqID, true}},
		{map[string]any{"includeInteractive": true}, []any{reqID, true}},
	} {
		var got struct {
			Requests []map[string]any `json:"requests"`
		}
		if err := other.Call(ctx, "approval.list", tc.params, &got); err != nil {
			t.Fatalf("approval.list %v: %v", tc.params, err)
		}
		var ids []any
		for _, r := range got.Requests {
			ids = append(ids, r["requestId"], r["interactive"])
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Fatalf("approval.list %v: %v, want %v", tc.params, ids, tc.want)
		}
	}
	if err := other.Call(ctx, "approval.list", map[string]any{"includeInteractive": "yes"}, nil); err == nil || err.StringCode() != "invalid_params" {
		t.Fatalf("approval.list includeInteractive \"yes\": %v, want invalid_params", err)
	}
}

func TestApprovalTimeout(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{ApprovalTimeout: time.Second})
	c := helloWS(t, d)
	// The client answers only once the turn is over: never in time.
	over := make(chan struct{})
	c.onRequest = func(string, json.RawMessage) (any, *errcode.Error) {
		<-over
		return map[string]any{"decision": "allow"}, nil
	}
	id := createSession(t, c, nil)
	c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	close(over)
	if e := findKind(evs, "error"); len(e) != 1 || e[0]["code"] != "approval_timeout" {
		t.Fatalf("errors %v, want one approval_timeout", e)
	}
}

func TestReadOutsideWorkdirRefused(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	wd := t.TempDir()
	sub := filepath.Join(wd, "a", "b")
	os.MkdirAll(sub, 0o755)
	os.Symlink("/etc/passwd", filepath.Join(sub, "link"))
	id := createSession(t, c, map[string]any{"workdir": sub})
	for i, prompt := range []string{"read passwd", "read link"} {
		c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": prompt}, nil)
		evs := collect(t, c.Events(id), "turn.done", 1)
		r := findKind(evs, "tool.result")
		if len(r) != 1 || r[0]["ok"] != false || strings.Contains(r[0]["output"].(string), "root:") {
			t.Fatalf("%d %s: %v", i, prompt, r)
		}
		if !strings.Contains(r[0]["output"].(string), "outside") {
			t.Fatalf("%s: refusal does not say why: %q", prompt, r[0]["output"])
		}
	}
}

// TestGRPCOnlyApprover: a gRPC client creates a session, attaches as its
// approver with Attach, and approves a call; no WebSocket is involved.
func TestGRPCOnlyApprover(t *testing.T) {
	d := startDaemon(t)
	c := dialGRPC(t, d)
	ctx, cancel := context.WithCancel(c.outgoing(context.Background()))
	defer cancel()
	stream, err := trellisv1.NewApprovalServiceClient(c.conn).Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Start{Start: &trellisv1.AttachStart{OriginId: c.origin}}})
	if r, err := stream.Recv(); err != nil || r.GetReady() == nil {
		t.Fatalf("attach: %v %v", r, err)
	}
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get("trellis-origin")) == 0 {
		t.Fatal("no origin metadata")
	}
	id := createSession(t, c, nil)
	c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil)
	r, err := stream.Recv()
	if err != nil || r.GetRequest() == nil || r.GetRequest().GetTool() != "shell" {
		t.Fatalf("expected an approval request: %v %v", r, err)
	}
	stream.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Decision{Decision: &trellisv1.AttachDecision{
		RequestId: r.GetRequest().GetRequestId(), Reply: &trellisv1.ApprovalReply{Decision: "allow"},
	}}})
	evs := collect(t, c.Events(id), "turn.done", 1)
	if res := findKind(evs, "tool.result"); len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("gRPC-approved call: %v", res)
	}
}

// waitConnections polls system.info until the daemon counts n connections.
func waitConnections(t *testing.T, c client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var info struct {
			Counters struct {
				Connections int `json:"connections"`
			} `json:"counters"`
		}
		if err := c.Call(context.Background(), "system.info", map[string]any{}, &info); err != nil {
			t.Fatal(err)
		}
		if info.Counters.Connections == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the daemon never counted %d connections", n)
}
