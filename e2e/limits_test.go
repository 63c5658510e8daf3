package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/facade"
	"github.com/trellis-run/trellis/facade/rest"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/runtime/session"
)

// restError is the body of a REST error.
type restError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

func decodeRESTError(t *testing.T, b []byte) restError {
	t.Helper()
	var e restError
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e
}

// TestRESTBodyOverTheCapIsRefusedBeforeReading sends headers announcing a
// body one byte over the cap and no body at all: the answer (413) comes
// without the daemon waiting for a byte of it.
func TestRESTBodyOverTheCapIsRefusedBeforeReading(t *testing.T) {
	d := startDaemon(t)
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", d.HTTPPort()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/session/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		d.Token(), rest.MaxBodyBytes+1)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	e := decodeRESTError(t, b)
	if e.Data["code"] != "payload_too_large" || e.Data["limit"] != float64(rest.MaxBodyBytes) {
		t.Errorf("body %s", b)
	}
}

// TestRESTChunkedBodyOverTheCap streams a body with no Content-Length past
// the cap: 413 payload_too_large, never overloaded or invalid_params.
func TestRESTChunkedBodyOverTheCap(t *testing.T) {
	d := startDaemon(t)
	body := io.MultiReader(strings.NewReader(`{"workdir":"`), &repeatReader{b: 'a', n: rest.MaxBodyBytes + 1}, strings.NewReader(`"}`))
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/v1/session/create", d.HTTPPort()), body)
	req.Header.Set("Authorization", "Bearer "+d.Token())
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if e := decodeRESTError(t, b); e.Data["code"] != "payload_too_large" || e.Data["limit"] != float64(rest.MaxBodyBytes) {
		t.Errorf("body %s", b)
	}
}

type repeatReader struct {
	b byte
	n int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.n)
	for i := range p[:n] {
		p[i] = r.b
	}
	r.n -= n
	return int(n), nil
}

func TestRESTMethodMismatchIs405(t *testing.T) {
	d := startDaemon(t)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/session/create", http.StatusMethodNotAllowed, "method_not_found"},
		{"DELETE", "/v1/session/list", http.StatusMethodNotAllowed, "method_not_found"},
		{"POST", "/v1/no/such/route", http.StatusNotFound, "not_found"},
	} {
		req, _ := http.NewRequest(tc.method, fmt.Sprintf("http://127.0.0.1:%d%s", d.HTTPPort(), tc.path), nil)
		req.Header.Set("Authorization", "Bearer "+d.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.status, b)
			continue
		}
		if e := decodeRESTError(t, b); e.Data["code"] != tc.code || !strings.Contains(e.Message, tc.path) {
			t.Errorf("%s %s: %s", tc.method, tc.path, b)
		}
	}
}

// rawCodec sends bytes as they are, to put garbage on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestGRPCUndecodableRequestIsInvalidArgument sends bytes that are no
// protobuf message, unary and on a stream: InvalidArgument, not Internal.
func TestGRPCUndecodableRequestIsInvalidArgument(t *testing.T) {
	d := startDaemon(t)
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+d.Token())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f} // field 0 with an invalid tag
	var out []byte
	err = conn.Invoke(ctx, "/trellis.v1.SessionService/ListSessions", &garbage, &out, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "not a valid protobuf message") {
		t.Errorf("unary: %v", err)
	}
	if strings.Contains(status.Convert(err).Message(), "proto:") {
		t.Errorf("the message names the protobuf library: %v", err)
	}
	// The same call with a valid (empty) message works.
	empty := []byte{}
	if err := conn.Invoke(ctx, "/trellis.v1.SessionService/ListSessions", &empty, &out, grpc.ForceCodecV2(rawCodec{})); err != nil {
		t.Errorf("valid request: %v", err)
	}
	// A server stream: the request is received through RecvMsg.
	desc := &grpc.StreamDesc{ServerStreams: true}
	st, err := conn.NewStream(ctx, desc, "/trellis.v1.SessionService/Subscribe", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&garbage); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	err = st.RecvMsg(&out)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("stream: %v", err)
	}
}

// rawUpgrade opens a WebSocket by hand (to send what no library would).
func rawUpgrade(t *testing.T, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return conn, br
}

// TestOversizedWebSocketLengthHeaderClosesTheConnection announces a 2^62
// byte frame and sends nothing more: the server closes with 1009 at once
// instead of waiting for the payload.
func TestOversizedWebSocketLengthHeaderClosesTheConnection(t *testing.T) {
	d := startDaemon(t)
	conn, br := rawUpgrade(t, d.HTTPPort())
	conn.Write([]byte{0x81, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4})
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(br) // the close frame, then EOF
	if err != nil {
		t.Fatalf("the server did not close the connection: %v (read %q)", err, b)
	}
	if len(b) < 4 || b[0] != 0x88 || b[2] != 0x03 || b[3] != 0xf1 {
		t.Fatalf("want a close frame with status 1009, got %q", b)
	}
	// The daemon still serves.
	helloWS(t, d).Close()
}

// TestHelloDeadline: a connection that never says hello is closed (1008)
// after the hello timeout.
func TestHelloDeadline(t *testing.T) {
	d := startDaemon(t)
	c, err := ws.Dial(context.Background(), fmt.Sprintf("ws://127.0.0.1:%d/ws", d.HTTPPort()), ws.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), facade.DefaultHelloTimeout+30*time.Second)
	defer cancel()
	_, err = c.ReadMessage(ctx)
	var ce *ws.CloseError
	if ctx.Err() != nil || !errors.As(err, &ce) || ce.Code != 1008 {
		t.Fatalf("read: %v, want a close with status 1008", err)
	}
}

// TestUnauthenticatedConnectionCap: past the cap of connections waiting
// for hello, the upgrade is refused with 503; a connection that completes
// hello frees its place.
func TestUnauthenticatedConnectionCap(t *testing.T) {
	d := startDaemon(t)
	url := fmt.Sprintf("ws://127.0.0.1:%d/ws", d.HTTPPort())
	var idle []*ws.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range facade.DefaultMaxUnauthenticated - 1 {
		c, err := ws.Dial(context.Background(), url, ws.Options{})
		if err != nil {
			t.Fatalf("connection %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	hello := helloWS(t, d) // the last place, freed by its hello
	defer hello.Close()
	last, err := ws.Dial(context.Background(), url, ws.Options{})
	if err != nil {
		t.Fatalf("the place of an authenticated connection was not freed: %v", err)
	}
	idle = append(idle, last)
	_, err = ws.Dial(context.Background(), url, ws.Options{})
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("connection over the cap: %v", err)
	}
	resp, err := http.Get(strings.Replace(url, "ws://", "http://", 1))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "system.hello") {
		t.Errorf("refusal: %d %s", resp.StatusCode, b)
	}
}

// TestQueuedPromptsAreBounded: behind a running turn, a session takes
// session.MaxQueuedPrompts prompts; the next is session_busy with the
// queue length.
func TestQueuedPromptsAreBounded(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range session.MaxQueuedPrompts {
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
			t.Fatalf("queued prompt %d: %v", i+1, err)
		}
	}
	err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)
	if err == nil || !err.HasCode("session_busy") || fmt.Sprint(err.Data["queueLength"]) != fmt.Sprint(session.MaxQueuedPrompts) {
		t.Fatalf("prompt over the bound: %v (data %#v)", err, err.Data)
	}
	// An interrupt ends the running turn and drops the queue at once: every
	// queued prompt gets its turn.done, and the session is idle.
	if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c, id)
	done := 0
	for _, ev := range assertContiguous(t, c, id) {
		if ev["kind"] == "turn.done" {
			done++
		}
	}
	if done != session.MaxQueuedPrompts+1 {
		t.Errorf("%d turn.done after the interrupt, want %d (the running turn and every queued one)", done, session.MaxQueuedPrompts+1)
	}
}

// TestHelloLimitsAreDaemonFlags: trellisd --hello-timeout and
// --max-unauthenticated set the hello deadline and the cap on connections
// waiting for hello; system.hello advertises both; out-of-range values are
// refused at start.
func TestHelloLimitsAreDaemonFlags(t *testing.T) {
	p := startProcArgs(t, t.TempDir(), io.Discard, "--hello-timeout", "1500ms", "--max-unauthenticated", "3")
	url := fmt.Sprintf("ws://127.0.0.1:%d/ws", p.info.Port)
	ctx := context.Background()

	authed, err := ws.Dial(ctx, url, ws.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	hello, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "system.hello",
		"params": map[string]any{"token": p.info.Token, "clientVersion": "test", "protocolVersion": "1.0.0"}})
	if err := authed.WriteMessage(ctx, hello); err != nil {
		t.Fatal(err)
	}
	b, err := authed.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Result struct {
			Limits map[string]any `json:"limits"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if l := res.Result.Limits; fmt.Sprint(l["helloTimeoutMs"]) != "1500" || fmt.Sprint(l["maxUnauthenticated"]) != "3" {
		t.Errorf("system.hello limits: %v", l)
	}

	// Three connections fill the cap (the authenticated one does not count).
	var idle []*ws.Conn
	for range 3 {
		c, err := ws.Dial(ctx, url, ws.Options{})
		if err != nil {
			t.Fatalf("connection %d under the cap: %v", len(idle)+1, err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	if _, err := ws.Dial(ctx, url, ws.Options{}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a fourth connection waiting for hello: %v, want 503", err)
	}
	// Each is closed by the configured deadline (its reason names it).
	for _, c := range idle {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.ReadMessage(rctx)
		cancel()
		var ce *ws.CloseError
		if !errors.As(err, &ce) || ce.Code != 1008 || !strings.Contains(ce.Reason, "within 1.5s") {
			t.Fatalf("idle connection: %v, want a 1008 close naming the 1.5s deadline", err)
		}
	}
	// Their places are free again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := ws.Dial(ctx, url, ws.Options{})
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no place freed after the idle connections closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, args := range [][]string{{"--hello-timeout", "1ms"}, {"--max-unauthenticated", "-1"}} {
		out, err := exec.Command(trellisdBin, append([]string{"--home", t.TempDir(), "--provider", "fake"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("trellisd %v: %v\n%s", args, err, out)
		}
	}
}
