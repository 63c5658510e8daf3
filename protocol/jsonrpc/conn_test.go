package jsonrpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/jsonrpc/jsonrpctest"
)

// peer is the client side of a pipe, reading frames with a deadline.
type peer struct {
	t  *testing.T
	tr jsonrpc.Transport
}

func (p *peer) send(frame string) {
	p.t.Helper()
	if err := p.tr.WriteMessage(context.Background(), []byte(frame)); err != nil {
		p.t.Fatalf("send: %v", err)
	}
}

func (p *peer) recv() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := p.tr.ReadMessage(ctx)
	if err != nil {
		p.t.Fatalf("recv: %v", err)
	}
	return string(b)
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serve starts a Conn with h on one end of a pipe and returns the other end.
func serve(t *testing.T, h jsonrpc.Handler, opts jsonrpc.Options) (*jsonrpc.Conn, *peer) {
	t.Helper()
	client, server := jsonrpctest.Pipe()
	if opts.Log == nil {
		opts.Log = quietLog()
	}
	if opts.Errors == nil {
		opts.Errors = jsonrpctest.DeterministicErrors(nil)
	}
	c := jsonrpc.NewConn(server, h, opts)
	served := make(chan error, 1)
	go func() { served <- c.Serve(context.Background()) }()
	t.Cleanup(func() {
		c.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return c, &peer{t: t, tr: client}
}

// TestRequestsRunConcurrently: a slow request does not hold back a later
// one, so replies come out of order.
func TestRequestsRunConcurrently(t *testing.T) {
	release := make(chan struct{})
	h := jsonrpc.HandlerFunc(func(ctx context.Context, _ *jsonrpc.Conn, method string, _ json.RawMessage) (any, *jsonrpc.Error) {
		if method == "slow" {
			<-release
		}
		return json.RawMessage(`"` + method + `"`), nil
	})
	_, p := serve(t, h, jsonrpc.Options{})
	p.send(`{"jsonrpc":"2.0","id":1,"method":"slow"}`)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"fast"}`)
	if got := p.recv(); got != `{"jsonrpc":"2.0","id":2,"result":"fast"}` {
		t.Fatalf("first reply %s", got)
	}
	close(release)
	if got := p.recv(); got != `{"jsonrpc":"2.0","id":1,"result":"slow"}` {
		t.Fatalf("second reply %s", got)
	}
}

// TestInFlightLimit: beyond MaxInFlight a request is answered overloaded
// with data.retryAfterMs at once; once a slot frees, requests run again.
func TestInFlightLimit(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	h := jsonrpc.HandlerFunc(func(ctx context.Context, _ *jsonrpc.Conn, method string, _ json.RawMessage) (any, *jsonrpc.Error) {
		if method == "block" {
			started <- struct{}{}
			<-release
		}
		return nil, nil
	})
	_, p := serve(t, h, jsonrpc.Options{MaxInFlight: 2, RetryAfterMs: 250})
	p.send(`{"jsonrpc":"2.0","id":1,"method":"block"}`)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"block"}`)
	<-started
	<-started
	p.send(`{"jsonrpc":"2.0","id":3,"method":"other"}`)
	want := `{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"too many requests in flight; retry after 250 ms","data":{"code":"overloaded","retryAfterMs":250}}}`
	if got := p.recv(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	close(release)
	got := []string{p.recv(), p.recv()}
	for _, g := range got {
		if !strings.Contains(g, `"result":null`) {
			t.Fatalf("blocked request answered %s", g)
		}
	}
	p.send(`{"jsonrpc":"2.0","id":4,"method":"other"}`)
	if got := p.recv(); got != `{"jsonrpc":"2.0","id":4,"result":null}` {
		t.Fatalf("after release: %s", got)
	}
}

// TestBatchRunsConcurrentlyAndRepliesOnce: entries of a batch run at the
// same time (one waits for the other) and their replies form one array.
func TestBatchRunsConcurrentlyAndRepliesOnce(t *testing.T) {
	aStarted := make(chan struct{})
	h := jsonrpc.HandlerFunc(func(ctx context.Context, _ *jsonrpc.Conn, method string, _ json.RawMessage) (any, *jsonrpc.Error) {
		switch method {
		case "a":
			close(aStarted)
		case "b":
			<-aStarted // deadlocks unless a runs concurrently
		}
		return method, nil
	})
	_, p := serve(t, h, jsonrpc.Options{})
	p.send(`[{"jsonrpc":"2.0","id":"x","method":"b"},{"jsonrpc":"2.0","id":"y","method":"a"}]`)
	want := `[{"jsonrpc":"2.0","id":"x","result":"b"},{"jsonrpc":"2.0","id":"y","result":"a"}]`
	if got := p.recv(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestBatchLimitIsInclusive(t *testing.T) {
	h := jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return true, nil
	})
	_, p := serve(t, h, jsonrpc.Options{MaxBatch: 3})
	p.send(`[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":2,"method":"m"},{"jsonrpc":"2.0","id":3,"method":"m"}]`)
	var replies []json.RawMessage
	if err := json.Unmarshal([]byte(p.recv()), &replies); err != nil || len(replies) != 3 {
		t.Fatalf("batch of 3 with limit 3: %d replies, %v", len(replies), err)
	}
	p.send(`[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":2,"method":"m"},{"jsonrpc":"2.0","id":3,"method":"m"},{"jsonrpc":"2.0","id":4,"method":"m"}]`)
	if got := p.recv(); !strings.Contains(got, "batch of 4 entries exceeds the limit of 3") {
		t.Fatalf("got %s", got)
	}
}

func TestResultEncodings(t *testing.T) {
	h := jsonrpc.HandlerFunc(func(_ context.Context, _ *jsonrpc.Conn, method string, _ json.RawMessage) (any, *jsonrpc.Error) {
		switch method {
		case "raw":
			return json.RawMessage(`{"b":1,"a":2}`), nil
		case "proto":
			return &trellisv1.UsageEvent{InputTokens: 1 << 40}, nil
		case "go":
			return map[string]any{"html": "<&>"}, nil
		case "bad":
			return func() {}, nil
		case "panic":
			panic("boom")
		}
		return nil, nil
	})
	_, p := serve(t, h, jsonrpc.Options{})
	cases := []struct{ method, want string }{
		{"raw", `{"jsonrpc":"2.0","id":1,"result":{"b":1,"a":2}}`},
		{"proto", `{"jsonrpc":"2.0","id":1,"result":{"inputTokens":1099511627776,"outputTokens":0,"provider":"","model":"","reasoningTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":0,"priced":false,"turnId":""}}`},
		{"go", `{"jsonrpc":"2.0","id":1,"result":{"html":"<&>"}}`},
		{"nil", `{"jsonrpc":"2.0","id":1,"result":null}`},
		{"bad", `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal error (id e-1)","data":{"code":"internal","errorId":"e-1"}}}`},
		{"panic", `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal error (id e-2)","data":{"code":"internal","errorId":"e-2"}}}`},
	}
	for _, tc := range cases {
		p.send(`{"jsonrpc":"2.0","id":1,"method":"` + tc.method + `"}`)
		if got := p.recv(); got != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.method, got, tc.want)
		}
	}
}

func TestErrorWithoutStringCodeGetsOne(t *testing.T) {
	h := jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, &jsonrpc.Error{Code: -32601, Message: "hand-made"}
	})
	_, p := serve(t, h, jsonrpc.Options{})
	p.send(`{"jsonrpc":"2.0","id":1,"method":"m"}`)
	want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"hand-made","data":{"code":"method_not_found"}}}`
	if got := p.recv(); got != want {
		t.Fatalf("got %s", got)
	}
}

// TestCall: server → client requests get ids s1, s2, …; responses are
// routed by id, in any order; error replies come back as *Error.
func TestCall(t *testing.T) {
	c, p := serve(t, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, nil
	}), jsonrpc.Options{})

	type out struct {
		res json.RawMessage
		err error
	}
	first, second := make(chan out, 1), make(chan out, 1)
	go func() {
		r, err := c.Call(context.Background(), "approval.request", &trellisv1.ApprovalRequest{RequestId: "ap-1", TimeoutSec: 300})
		first <- out{r, err}
	}()
	req1 := p.recv()
	go func() {
		r, err := c.Call(context.Background(), "approval.request", json.RawMessage(`{"requestId":"ap-2"}`))
		second <- out{r, err}
	}()
	req2 := p.recv()
	if !strings.HasPrefix(req1, `{"jsonrpc":"2.0","id":"s1","method":"approval.request","params":{"requestId":"ap-1",`) ||
		!strings.Contains(req1, `"timeoutSec":300`) {
		t.Fatalf("first request %s", req1)
	}
	if req2 != `{"jsonrpc":"2.0","id":"s2","method":"approval.request","params":{"requestId":"ap-2"}}` {
		t.Fatalf("second request %s", req2)
	}
	p.send(`{"jsonrpc":"2.0","id":"s2","error":{"code":-32000,"message":"no","data":{"code":"approval_denied"}}}`)
	p.send(`{"jsonrpc":"2.0","id":"s1","result":{"decision":"allow"}}`)
	r1, r2 := <-first, <-second
	if r1.err != nil || string(r1.res) != `{"decision":"allow"}` {
		t.Fatalf("first: %s %v", r1.res, r1.err)
	}
	var e *jsonrpc.Error
	if !errors.As(r2.err, &e) || !e.HasCode("approval_denied") || e.Message != "no" {
		t.Fatalf("second: %v", r2.err)
	}
}

func TestCallEndsWithContextAndClose(t *testing.T) {
	c, p := serve(t, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, nil
	}), jsonrpc.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Call(ctx, "approval.request", nil); done <- err }()
	if got := p.recv(); got != `{"jsonrpc":"2.0","id":"s1","method":"approval.request"}` {
		t.Fatalf("request %s", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
	// A late answer to the abandoned call is ignored.
	p.send(`{"jsonrpc":"2.0","id":"s1","result":{}}`)

	go func() { _, err := c.Call(context.Background(), "approval.request", nil); done <- err }()
	p.recv()
	c.Close()
	if err := <-done; !errors.Is(err, jsonrpc.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if _, err := c.Call(context.Background(), "x", nil); !errors.Is(err, jsonrpc.ErrClosed) {
		t.Fatalf("call on a closed conn: %v", err)
	}
	if err := c.Notify(context.Background(), "x", nil); !errors.Is(err, jsonrpc.ErrClosed) {
		t.Fatalf("notify on a closed conn: %v", err)
	}
}

func TestNotify(t *testing.T) {
	c, p := serve(t, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, nil
	}), jsonrpc.Options{})
	ev := &trellisv1.SessionEvent{SessionId: "s-1", Seq: 3, Ts: "2026-01-02T03:04:05.000Z",
		Payload: &trellisv1.SessionEvent_MessageDelta{MessageDelta: &trellisv1.MessageDeltaEvent{Text: "hi"}}}
	if err := c.Notify(context.Background(), "session.event", ev); err != nil {
		t.Fatal(err)
	}
	want := `{"jsonrpc":"2.0","method":"session.event","params":{"sessionId":"s-1","seq":3,"kind":"message.delta","payload":{"text":"hi"},"ts":"2026-01-02T03:04:05.000Z"}}`
	if got := p.recv(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// TestCloseCancelsRequestsAndRunsCallbacks: closing the connection (here by
// the peer) cancels every running request's context and runs OnClose once.
func TestCloseCancelsRequestsAndRunsCallbacks(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	h := jsonrpc.HandlerFunc(func(ctx context.Context, _ *jsonrpc.Conn, _ string, _ json.RawMessage) (any, *jsonrpc.Error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return nil, nil
	})
	client, server := jsonrpctest.Pipe()
	c := jsonrpc.NewConn(server, h, jsonrpc.Options{Log: quietLog()})
	var calls []string
	var mu sync.Mutex
	c.OnClose(func() { mu.Lock(); calls = append(calls, "first"); mu.Unlock() })
	c.OnClose(func() { mu.Lock(); calls = append(calls, "second"); mu.Unlock() })
	served := make(chan error, 1)
	go func() { served <- c.Serve(context.Background()) }()
	p := &peer{t: t, tr: client}
	p.send(`{"jsonrpc":"2.0","id":1,"method":"wait"}`)
	<-started
	client.Close()
	<-cancelled
	if err := <-served; err != nil {
		t.Fatalf("Serve after the peer left: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
	if c.Context().Err() == nil {
		t.Fatal("Context not cancelled")
	}
	mu.Lock()
	got := strings.Join(calls, ",")
	mu.Unlock()
	if got != "first,second" {
		t.Fatalf("callbacks ran %q", got)
	}
	late := make(chan struct{})
	c.OnClose(func() { close(late) })
	<-late
}

func TestServeEndsWithItsContext(t *testing.T) {
	_, server := jsonrpctest.Pipe()
	c := jsonrpc.NewConn(server, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
		return nil, nil
	}), jsonrpc.Options{Log: quietLog()})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx) }()
	cancel()
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve returned %v", err)
	}
}

// stallTransport never completes a write until released.
type stallTransport struct {
	release chan struct{}
	closed  chan struct{}
	once    sync.Once
	writes  chan []byte
}

func newStall() *stallTransport {
	return &stallTransport{release: make(chan struct{}), closed: make(chan struct{}), writes: make(chan []byte, 100)}
}

func (s *stallTransport) ReadMessage(ctx context.Context) ([]byte, error) {
	select {
	case <-s.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *stallTransport) WriteMessage(ctx context.Context, b []byte) error {
	select {
	case <-s.release:
		s.writes <- b
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return io.ErrClosedPipe
	}
}

func (s *stallTransport) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// TestWriteQueueIsBounded: with a peer that does not read, Notify fills the
// queue and then waits within its context.
func TestWriteQueueIsBounded(t *testing.T) {
	tr := newStall()
	c := jsonrpc.NewConn(tr, nil, jsonrpc.Options{WriteQueue: 2, Log: quietLog()})
	defer c.Close()
	// One frame is taken by the stalled writer, two fill the queue.
	sent := 0
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.Notify(ctx, "n", nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent++
	}
	if sent != 3 {
		t.Fatalf("queued %d frames before blocking, want 3 (1 writing + queue of 2)", sent)
	}
	close(tr.release)
	for i := 0; i < 3; i++ {
		if got := string(<-tr.writes); got != `{"jsonrpc":"2.0","method":"n"}` {
			t.Fatalf("frame %d = %s", i, got)
		}
	}
}

// TestWriteTimeoutCloses: a write that does not finish within WriteTimeout
// closes the connection.
func TestWriteTimeoutCloses(t *testing.T) {
	tr := newStall()
	c := jsonrpc.NewConn(tr, nil, jsonrpc.Options{WriteTimeout: 20 * time.Millisecond, Log: quietLog()})
	if err := c.Notify(context.Background(), "n", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection still open after a stalled write")
	}
}

// TestGateOpensOnlyOnSuccess: concurrent calls during a running hello are
// refused; after a failed hello the gate stays shut.
func TestGateOpensOnlyOnSuccess(t *testing.T) {
	helloStarted := make(chan struct{}, 1)
	finishHello := make(chan *jsonrpc.Error)
	inner := jsonrpc.HandlerFunc(func(_ context.Context, _ *jsonrpc.Conn, method string, _ json.RawMessage) (any, *jsonrpc.Error) {
		if method == "system.hello" {
			helloStarted <- struct{}{}
			if err := <-finishHello; err != nil {
				return nil, err
			}
		}
		return method, nil
	})
	h := jsonrpc.Gate("system.hello", inner)
	_, p := serve(t, h, jsonrpc.Options{})
	call := func(id int, method string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q}`, id, method)
	}
	unauthorized := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"error":{"code":-32000,"message":"call system.hello first","data":{"code":"unauthorized"}}}`, id)
	}
	p.send(call(1, "system.hello"))
	<-helloStarted
	p.send(call(2, "session.list"))
	if got := p.recv(); got != unauthorized(2) {
		t.Fatalf("during hello: %s", got)
	}
	finishHello <- errcode.NewUnauthorized("bad token")
	if got := p.recv(); !strings.Contains(got, `"message":"bad token"`) {
		t.Fatalf("failed hello: %s", got)
	}
	if jsonrpc.Opened(h) {
		t.Fatal("gate opened by a failed hello")
	}
	p.send(call(3, "session.list"))
	if got := p.recv(); got != unauthorized(3) {
		t.Fatalf("after failed hello: %s", got)
	}
	p.send(call(4, "system.hello"))
	<-helloStarted
	finishHello <- nil
	if got := p.recv(); got != `{"jsonrpc":"2.0","id":4,"result":"system.hello"}` {
		t.Fatalf("hello: %s", got)
	}
	p.send(call(5, "session.list"))
	if got := p.recv(); got != `{"jsonrpc":"2.0","id":5,"result":"session.list"}` {
		t.Fatalf("after hello: %s", got)
	}
	if !jsonrpc.Opened(h) {
		t.Fatal("Opened false after hello")
	}
}
