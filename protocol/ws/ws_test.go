package ws_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/trellis-run/trellis/internal/transcript"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/jsonrpc/jsonrpctest"
	"github.com/trellis-run/trellis/protocol/ws"
)

// server is a loopback HTTP server whose /ws serves the fake table over
// JSON-RPC; accepted reports each server-side connection.
type server struct {
	*httptest.Server
	accepted chan *ws.Conn
}

func newServer(t *testing.T, opts ws.Options) *server {
	t.Helper()
	s := &server{accepted: make(chan *ws.Conn, 16)}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, opts)
		if err != nil {
			return
		}
		s.accepted <- c
		conn := jsonrpctest.ServeFake(c, jsonrpc.Options{Log: opts.Log})
		<-conn.Done()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) url() string { return "ws" + strings.TrimPrefix(s.URL, "http") + "/ws" }

func dial(t *testing.T, url string, opts ws.Options) *ws.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := ws.Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGoldenTranscriptsOverWebSocket plays the same transcripts as the
// jsonrpc package, over a real WebSocket: the behaviour is the transport's
// too.
func TestGoldenTranscriptsOverWebSocket(t *testing.T) {
	s := newServer(t, ws.Options{})
	transcript.RunDir(t, "../testdata/jsonrpc/*.txtar", func(t *testing.T) jsonrpc.Transport {
		return dial(t, s.url(), ws.Options{})
	})
}

func TestRefusedOrigin(t *testing.T) {
	s := newServer(t, ws.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := ws.Dial(ctx, s.url(), ws.Options{Header: http.Header{"Origin": {"https://evil.example"}}})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("dial from a foreign page: %v", err)
	}
	// The same page is let in when allowed.
	s2 := newServer(t, ws.Options{AllowedOrigins: []string{"https://evil.example"}})
	c := dial(t, s2.url(), ws.Options{Header: http.Header{"Origin": {"https://evil.example"}}})
	c.Close()
}

func roundTrip(t *testing.T, c *ws.Conn, frame string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WriteMessage(ctx, []byte(frame)); err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadLimit: a frame over the limit closes the connection with 1009.
func TestReadLimit(t *testing.T) {
	s := newServer(t, ws.Options{ReadLimit: 1024})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, _, err := websocket.Dial(ctx, s.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	small := `{"jsonrpc":"2.0","id":1,"method":"x","params":{"pad":"` + strings.Repeat("a", 900) + `"}}`
	if err := raw.Write(ctx, websocket.MessageText, []byte(small)); err != nil {
		t.Fatal(err)
	}
	if _, b, err := raw.Read(ctx); err != nil || !strings.Contains(string(b), `"id":1`) {
		t.Fatalf("frame under the limit: %s %v", b, err)
	}
	big := `{"pad":"` + strings.Repeat("a", 2000) + `"}`
	if err := raw.Write(ctx, websocket.MessageText, []byte(big)); err != nil {
		t.Fatal(err)
	}
	_, _, err = raw.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("after an oversized frame: %v", err)
	}
}

// TestBinaryFramesAreText: a binary frame is read as UTF-8 JSON; the reply
// is a text frame.
func TestBinaryFramesAreText(t *testing.T) {
	s := newServer(t, ws.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, _, err := websocket.Dial(ctx, s.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	if err := raw.Write(ctx, websocket.MessageBinary, []byte(`{"jsonrpc":"2.0","id":"b","method":"session.list"}`)); err != nil {
		t.Fatal(err)
	}
	typ, b, err := raw.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if typ != websocket.MessageText || !strings.Contains(string(b), `"id":"b","error":{"code":-32000,"message":"call system.hello first"`) {
		t.Fatalf("reply %v %s", typ, b)
	}
}

// TestKeepalive: a peer that answers pings stays connected over several
// intervals; one that stops answering is dropped after the pong timeout,
// and the server side's close callbacks run.
func TestKeepalive(t *testing.T) {
	s := newServer(t, ws.Options{PingInterval: 20 * time.Millisecond, PongTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	answer := make(chan bool, 1)
	answer <- true
	pings := make(chan struct{}, 100)
	raw, _, err := websocket.Dial(ctx, s.url(), &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			a := <-answer
			answer <- a
			return a
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	srv := <-s.accepted
	closed := make(chan struct{})
	srv.OnClose(func() { close(closed) })
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := raw.Read(ctx); err != nil {
				readErr <- err
				return
			}
		}
	}()

	for i := 0; i < 5; i++ {
		select {
		case <-pings:
		case <-ctx.Done():
			t.Fatal("no pings")
		}
	}
	select {
	case <-closed:
		t.Fatal("a peer that answers pings was dropped")
	default:
	}

	<-answer
	answer <- false
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("a peer that stopped answering pings is still connected")
	}
	select {
	case <-readErr:
	case <-ctx.Done():
		t.Fatal("client still reading after the server dropped it")
	}
}

// TestCloseCallbacks: a client's normal close reaches the server as the end
// of its reads, and the server connection's callbacks run once.
func TestCloseCallbacks(t *testing.T) {
	s := newServer(t, ws.Options{})
	c := dial(t, s.url(), ws.Options{})
	srv := <-s.accepted
	calls := make(chan string, 4)
	srv.OnClose(func() { calls <- "a" })
	srv.OnClose(func() { calls <- "b" })
	if got := roundTrip(t, c, `{"jsonrpc":"2.0","id":1,"method":"x"}`); !strings.Contains(got, `"id":1`) {
		t.Fatalf("reply %s", got)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("client close: %v", err)
	}
	<-srv.Done()
	if a, b := <-calls, <-calls; a != "a" || b != "b" {
		t.Fatalf("callbacks %s %s", a, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.ReadMessage(ctx); err == nil {
		t.Fatal("read after close succeeded")
	}
	late := make(chan struct{})
	srv.OnClose(func() { close(late) })
	<-late
}

// TestServerCloseIsNormal: when the server closes, the client reads io.EOF
// (a normal closure handshake happened).
func TestServerCloseIsNormal(t *testing.T) {
	s := newServer(t, ws.Options{})
	c := dial(t, s.url(), ws.Options{})
	srv := <-s.accepted
	// Keep the client reading so that it answers the close handshake.
	readErr := make(chan error, 1)
	go func() {
		_, err := c.ReadMessage(context.Background())
		readErr <- err
	}()
	if err := srv.Close(); err != nil {
		t.Fatalf("server close: %v", err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("client read %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client still reading")
	}
}
