package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
)

const script = `{"steps":[
 {"match":"hello","text":"Hello from the scripted model, streamed in small chunks of a few words each."},
 {"match":"run ls","text":"Running it.","tool_calls":[{"name":"shell","arguments":{"command":"echo from-shell"}}]},
 {"after_tool":"shell","text":"Done."},
 {"match":"fail","text":"Oh","error":"upstream exploded"}
]}`

// startDaemon runs a daemon in this process on a fresh home with the test
// script as its model.
func startDaemon(t *testing.T) *daemon.Daemon {
	t.Helper()
	home := t.TempDir()
	path := filepath.Join(home, "script.json")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func dial(t *testing.T, d *daemon.Daemon, opts client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.Home(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// untilTurnDone reads events up to the turn.done of turnID, checking that
// seqs rise by exactly one.
func untilTurnDone(t *testing.T, ctx context.Context, sub *client.Subscription, turnID string) []client.Event {
	t.Helper()
	var out []client.Event
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		if n := len(out); n > 0 && ev.Seq != out[n-1].Seq+1 {
			t.Fatalf("seq %d follows %d", ev.Seq, out[n-1].Seq)
		}
		out = append(out, ev)
		if ev.Kind == "turn.done" && ev.TurnID() == turnID {
			return out
		}
	}
}

func TestCreatePromptEventsInOrder(t *testing.T) {
	d := startDaemon(t)
	c := dial(t, d, client.Options{ClientKind: "test"})
	ctx := testCtx(t)
	if c.Hello().ProtocolVersion != "1.0.0" || c.Hello().ConnectionID == "" {
		t.Fatalf("hello = %+v", c.Hello())
	}
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	turnID, err := c.Prompt(ctx, sub.SessionID(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	evs := untilTurnDone(t, ctx, sub, turnID)
	if evs[0].Seq != 1 || evs[0].Kind != "turn.started" {
		t.Fatalf("first event %d %s, want 1 turn.started", evs[0].Seq, evs[0].Kind)
	}
	var text strings.Builder
	deltas := 0
	for _, ev := range evs {
		if ev.Kind == "message.delta" {
			text.WriteString(ev.Text())
			deltas++
		}
	}
	if deltas == 0 || text.String() != "Hello from the scripted model, streamed in small chunks of a few words each." {
		t.Fatalf("%d deltas add up to %q", deltas, text.String())
	}
	var done struct{ Reason string }
	if err := evs[len(evs)-1].Decode(&done); err != nil || done.Reason != "complete" {
		t.Fatalf("turn.done %s: %v", evs[len(evs)-1].Payload, err)
	}
}

func TestApprovalCallback(t *testing.T) {
	d := startDaemon(t)
	for _, tc := range []struct {
		decision string
		wantOK   bool
	}{{"allow", true}, {"deny", false}} {
		t.Run(tc.decision, func(t *testing.T) {
			var mu sync.Mutex
			var asked []client.ApprovalRequest
			c := dial(t, d, client.Options{Approve: func(_ context.Context, req client.ApprovalRequest) client.ApprovalAnswer {
				mu.Lock()
				asked = append(asked, req)
				mu.Unlock()
				return client.ApprovalAnswer{Decision: tc.decision, Reason: "test"}
			}})
			ctx := testCtx(t)
			sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			turnID, err := c.Prompt(ctx, sub.SessionID(), "run ls")
			if err != nil {
				t.Fatal(err)
			}
			evs := untilTurnDone(t, ctx, sub, turnID)
			mu.Lock()
			defer mu.Unlock()
			if len(asked) != 1 || asked[0].Tool != "shell" || asked[0].SessionID != sub.SessionID() || asked[0].TurnID != turnID {
				t.Fatalf("asked %+v", asked)
			}
			var args struct{ Command string }
			if err := json.Unmarshal(asked[0].Args, &args); err != nil || args.Command != "echo from-shell" {
				t.Fatalf("args %s: %v", asked[0].Args, err)
			}
			for _, ev := range evs {
				if ev.Kind == "tool.result" {
					var r struct{ OK bool }
					_ = ev.Decode(&r)
					if r.OK != tc.wantOK {
						t.Fatalf("tool.result %s, want ok=%v", ev.Payload, tc.wantOK)
					}
					return
				}
			}
			t.Fatal("no tool.result")
		})
	}
}

// TestCloseDeliversTheAnswer: a program that closes its client while its
// approval callback is giving an answer (a chat that quits right after the
// user said yes) still gets that answer to the daemon.
func TestCloseDeliversTheAnswer(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	var c *client.Client
	closed := make(chan error, 1)
	c = dial(t, d, client.Options{Approve: func(ctx context.Context, req client.ApprovalRequest) client.ApprovalAnswer {
		go func() { closed <- c.Close() }()
		// Close has begun: before, it cancelled this call at once and
		// dropped its reply; now it waits for it.
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		return client.ApprovalAnswer{Decision: "allow"}
	}})
	watcher := dial(t, d, client.Options{})
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Attach(ctx, sub.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prompt(ctx, sub.SessionID(), "run ls"); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("no tool.result: %v", err)
		}
		if ev.Kind == "tool.result" {
			var r struct{ OK bool }
			_ = ev.Decode(&r)
			if !r.OK {
				t.Fatalf("tool.result %s, want the call run on the closing client's allow", ev.Payload)
			}
			break
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// TestAttachAndResume pins the starting points: Attach from the latest
// event on, Resume with the stored history, a second connection seeing the
// same seqs.
func TestAttachAndResume(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	first := dial(t, d, client.Options{})
	sub, err := first.CreateSession(ctx, client.CreateSessionParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	turnID, err := first.Prompt(ctx, sub.SessionID(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	firstTurn := untilTurnDone(t, ctx, sub, turnID)
	last := firstTurn[len(firstTurn)-1].Seq

	second := dial(t, d, client.Options{})
	attached, err := second.Attach(ctx, sub.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	turnID, err = second.Prompt(ctx, sub.SessionID(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	evs := untilTurnDone(t, ctx, attached, turnID)
	if evs[0].Seq != last+1 || evs[0].Kind != "turn.started" {
		t.Fatalf("attached stream starts at %d %s, want %d turn.started", evs[0].Seq, evs[0].Kind, last+1)
	}

	third := dial(t, d, client.Options{})
	res, _, err := third.Resume(ctx, sub.SessionID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != int(evs[len(evs)-1].Seq) || res.Events[0].Seq != 1 {
		t.Fatalf("resume returned %d events, want %d", len(res.Events), evs[len(evs)-1].Seq)
	}
}

func TestPromptAttachesByItself(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	owner := dial(t, d, client.Options{})
	sub, err := owner.CreateSession(ctx, client.CreateSessionParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	other := dial(t, d, client.Options{})
	turnID, err := other.Prompt(ctx, sub.SessionID(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	s, err := other.Subscription(ctx, sub.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	evs := untilTurnDone(t, ctx, s, turnID)
	if evs[0].Kind != "turn.started" || evs[0].Seq != 1 {
		t.Fatalf("first event %d %s", evs[0].Seq, evs[0].Kind)
	}
}

func TestErrors(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	c := dial(t, d, client.Options{})

	_, err := c.Attach(ctx, "s-0000")
	if client.CodeOf(err) != "not_found" {
		t.Fatalf("attach unknown session: %v (code %q)", err, client.CodeOf(err))
	}
	err = c.Call(ctx, "session.create", map[string]any{"workdir": "/", "bogus": 1}, nil)
	var perr *client.Error
	if !errors.As(err, &perr) || perr.StringCode() != "invalid_params" {
		t.Fatalf("unknown param: %v", err)
	}

	if _, err := client.Dial(ctx, t.TempDir(), client.Options{}); !errors.Is(err, daemonfile.ErrNoDaemon) {
		t.Fatalf("dial an empty home: %v, want ErrNoDaemon", err)
	}

	info := c.Info()
	info.Token = "wrong"
	if _, err := client.DialInfo(ctx, info, client.Options{}); client.CodeOf(err) != "unauthorized" {
		t.Fatalf("bad token: %v", err)
	}

	c.Close()
	if err := c.Call(ctx, "system.health", nil, nil); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("call after close: %v, want ErrClosed", err)
	}
}

func TestDaemonStopEndsSubscriptions(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	c := dial(t, d, client.Options{})
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "system.shutdown", nil, nil); err != nil {
		t.Fatal(err)
	}
	// daemon.Run stops the daemon once it is asked to; Start leaves that
	// to its caller.
	select {
	case <-d.Stopping():
		d.Stop()
	case <-ctx.Done():
		t.Fatal("system.shutdown did not ask the daemon to stop")
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the connection did not close with the daemon")
	}
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after the daemon stopped: %v", err)
	}
}

func TestProbe(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	info, err := client.Probe(ctx, d.Home(), time.Second)
	if err != nil || info.Port != d.HTTPPort() {
		t.Fatalf("probe a running daemon: %+v %v", info, err)
	}

	if _, err := client.Probe(ctx, t.TempDir(), time.Second); !errors.Is(err, daemonfile.ErrNoDaemon) {
		t.Fatalf("probe an empty home: %v", err)
	}

	// daemon.json naming a live process (this one) with nothing on the
	// port: a daemon that does not answer.
	home := t.TempDir()
	stale := daemonfile.Info{Port: 1, PID: os.Getpid(), Token: "x"}
	b, _ := json.Marshal(stale)
	if err := os.WriteFile(daemonfile.Path(home), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Probe(ctx, home, 300*time.Millisecond); !errors.Is(err, client.ErrNotAnswering) {
		t.Fatalf("probe a daemon that does not answer: %v", err)
	}
}

// TestOperationIDs: a mutating call made twice with one operation id acts
// once; each call without one (the client makes one up) acts.
func TestOperationIDs(t *testing.T) {
	d := startDaemon(t)
	c := dial(t, d, client.Options{})
	ctx := testCtx(t)
	wd := t.TempDir()
	create := func(ctx context.Context) string {
		var r struct {
			SessionID string `json:"sessionId"`
		}
		if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd}, &r); err != nil {
			t.Fatal(err)
		}
		return r.SessionID
	}
	op := client.WithOperationID(ctx, client.NewOperationID())
	if a, b := create(op), create(op); a != b {
		t.Fatalf("two calls with one operation id created sessions %s and %s", a, b)
	}
	if a, b := create(ctx), create(ctx); a == b {
		t.Fatalf("two calls without an operation id answered the same session %s", a)
	}
	var list struct {
		Sessions []struct{} `json:"sessions"`
	}
	if err := c.Call(ctx, "session.list", map[string]any{"workdir": wd}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 3 {
		t.Fatalf("%d sessions, want 3", len(list.Sessions))
	}
	// A repeat with other params is refused, naming the conflict.
	var e *client.Error
	err := c.Call(op, "session.create", map[string]any{"workdir": t.TempDir()}, nil)
	if !errors.As(err, &e) || e.StringCode() != "invalid_params" || !strings.Contains(e.Message, "other params") {
		t.Fatalf("repeat with other params: %v", err)
	}
}
