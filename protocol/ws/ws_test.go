package ws_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	gobwas "github.com/gobwas/ws"

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

// rawClient is a client that writes and reads frames itself (through the
// library's frame API), to send what ws.Conn never would.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func rawDial(t *testing.T, url string) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, br, _, err := gobwas.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if br == nil {
		br = bufio.NewReader(nc)
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, nc: nc, br: br}
}

// write sends one masked frame.
func (c *rawClient) write(f gobwas.Frame) {
	c.t.Helper()
	if err := gobwas.WriteFrame(c.nc, gobwas.MaskFrame(f)); err != nil {
		c.t.Fatal(err)
	}
}

// readServerFrame reads one frame a server wrote (unmasked), its payload
// bounded by the server's read limit.
func readServerFrame(r io.Reader) (gobwas.Frame, error) {
	h, err := gobwas.ReadHeader(r)
	if err != nil {
		return gobwas.Frame{}, err
	}
	if h.Length > 32<<20 {
		return gobwas.Frame{}, fmt.Errorf("a frame of %d bytes, over any the server writes", h.Length)
	}
	f := gobwas.Frame{Header: h, Payload: make([]byte, h.Length)}
	_, err = io.ReadFull(r, f.Payload)
	return f, err
}

// read returns the next frame, pings answered unless answer says no.
func (c *rawClient) read(answer func() bool) (gobwas.Frame, error) {
	for {
		f, err := readServerFrame(c.br)
		if err != nil || f.Header.OpCode != gobwas.OpPing {
			return f, err
		}
		if answer == nil || answer() {
			c.write(gobwas.NewPongFrame(f.Payload))
		}
	}
}

// closeStatus reads frames until a close frame and returns its status.
func (c *rawClient) closeStatus() (gobwas.StatusCode, string) {
	c.t.Helper()
	for {
		f, err := c.read(nil)
		if err != nil {
			c.t.Fatalf("no close frame: %v", err)
		}
		if f.Header.OpCode == gobwas.OpClose {
			return gobwas.ParseCloseFrameData(f.Payload)
		}
	}
}

// TestWriteMessagesSizes: a batch of messages written at once reaches a
// client as the same messages, whatever their sizes (each length encoding
// of RFC 6455), with the server's pings in between; after the server
// closes, a batch fails.
func TestWriteMessagesSizes(t *testing.T) {
	s := newServer(t, ws.Options{PingInterval: time.Millisecond, PongTimeout: 5 * time.Second})
	c := dial(t, s.url(), ws.Options{ReadLimit: 1 << 20})
	srv := <-s.accepted
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sizes := []int{0, 1, 125, 126, 127, 1000, 1024, 65535, 65536, 70000}
	var rounds [][][]byte
	for round := 0; round < 20; round++ {
		var frames [][]byte
		for i, n := range sizes {
			frames = append(frames, []byte(fmt.Sprintf("%d/%d:", round, i)+strings.Repeat("x", n)))
		}
		rounds = append(rounds, frames)
		rounds = append(rounds, [][]byte{[]byte(fmt.Sprintf("%d/lone:", round) + strings.Repeat("y", 100000))})
	}
	// The client reads while the server writes: 6 MiB of frames need not
	// fit in the socket buffers.
	read := make(chan error, 1)
	go func() {
		var buf []byte
		for _, frames := range rounds {
			for _, w := range frames {
				got, err := c.ReadMessageInto(ctx, buf)
				if err != nil {
					read <- fmt.Errorf("message %.8q: %w", w, err)
					return
				}
				if !bytes.Equal(got, w) {
					read <- fmt.Errorf("%d bytes %.20q, want %d bytes %.20q", len(got), got, len(w), w)
					return
				}
				buf = got
			}
		}
		_, err := c.ReadMessage(ctx) // answers the close handshake
		read <- err
	}()
	for _, frames := range rounds {
		if err := srv.WriteMessages(ctx, frames); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; !errors.Is(err, io.EOF) {
		t.Fatalf("client read %v after the server's close, want io.EOF", err)
	}
	if err := srv.WriteMessages(ctx, [][]byte{[]byte("a"), []byte("b")}); err == nil {
		t.Fatal("WriteMessages after the close frame succeeded")
	}
}

// TestReadLimit: a message over the limit closes the connection with 1009,
// as soon as a header announces it (a header announcing 2^40 bytes and then
// nothing does not hold the connection open), and fragments count
// together.
func TestReadLimit(t *testing.T) {
	s := newServer(t, ws.Options{ReadLimit: 1024})
	small := `{"jsonrpc":"2.0","id":1,"method":"x","params":{"pad":"` + strings.Repeat("a", 900) + `"}}`
	for _, tc := range []struct {
		name string
		send func(c *rawClient)
	}{
		{"one frame", func(c *rawClient) { c.write(gobwas.NewTextFrame([]byte(strings.Repeat("a", 2000)))) }},
		{"a header alone", func(c *rawClient) {
			h := gobwas.Header{Fin: true, OpCode: gobwas.OpText, Length: 1 << 40, Masked: true, Mask: gobwas.NewMask()}
			if err := gobwas.WriteHeader(c.nc, h); err != nil {
				t.Fatal(err)
			}
		}},
		{"fragments", func(c *rawClient) {
			c.write(gobwas.NewFrame(gobwas.OpText, false, []byte(strings.Repeat("a", 600))))
			c.write(gobwas.NewFrame(gobwas.OpContinuation, true, []byte(strings.Repeat("a", 600))))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawDial(t, s.url())
			c.write(gobwas.NewTextFrame([]byte(small)))
			if f, err := c.read(nil); err != nil || !strings.Contains(string(f.Payload), `"id":1`) {
				t.Fatalf("frame under the limit: %s %v", f.Payload, err)
			}
			tc.send(c)
			if code, reason := c.closeStatus(); code != gobwas.StatusMessageTooBig || !strings.Contains(reason, "over the limit of 1024") {
				t.Fatalf("closed with %d %q, want 1009 naming the limit", code, reason)
			}
		})
	}
}

// TestFragmentsAndProtocolErrors: a message in fragments with a ping
// between them is read whole; a frame RFC 6455 forbids closes the
// connection with 1002.
func TestFragmentsAndProtocolErrors(t *testing.T) {
	s := newServer(t, ws.Options{})
	c := rawDial(t, s.url())
	c.write(gobwas.NewFrame(gobwas.OpText, false, []byte(`{"jsonrpc":"2.0",`)))
	c.write(gobwas.NewPingFrame([]byte("p")))
	c.write(gobwas.NewFrame(gobwas.OpContinuation, false, []byte(`"id":"f",`)))
	c.write(gobwas.NewFrame(gobwas.OpContinuation, true, []byte(`"method":"session.list"}`)))
	var got []gobwas.Frame
	for len(got) < 2 {
		f, err := c.read(nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	if got[0].Header.OpCode != gobwas.OpPong || string(got[0].Payload) != "p" {
		t.Errorf("first frame %v %q, want the pong of p", got[0].Header.OpCode, got[0].Payload)
	}
	if !strings.Contains(string(got[1].Payload), `"id":"f"`) {
		t.Errorf("reply %q, want the answer to the fragmented request", got[1].Payload)
	}

	for _, tc := range []struct {
		name string
		send func(c *rawClient)
	}{
		{"unmasked", func(c *rawClient) {
			if err := gobwas.WriteFrame(c.nc, gobwas.NewTextFrame([]byte("{}"))); err != nil {
				t.Fatal(err)
			}
		}},
		{"continuation first", func(c *rawClient) { c.write(gobwas.NewFrame(gobwas.OpContinuation, true, []byte("{}"))) }},
		{"reserved opcode", func(c *rawClient) { c.write(gobwas.NewFrame(gobwas.OpCode(0x3), true, []byte("{}"))) }},
		{"fragmented ping", func(c *rawClient) { c.write(gobwas.NewFrame(gobwas.OpPing, false, nil)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawDial(t, s.url())
			tc.send(c)
			if code, _ := c.closeStatus(); code != gobwas.StatusProtocolError {
				t.Fatalf("closed with %d, want 1002", code)
			}
		})
	}
}

// TestBinaryFramesAreText: a binary frame is read as UTF-8 JSON; the reply
// is a text frame.
func TestBinaryFramesAreText(t *testing.T) {
	s := newServer(t, ws.Options{})
	c := rawDial(t, s.url())
	c.write(gobwas.NewBinaryFrame([]byte(`{"jsonrpc":"2.0","id":"b","method":"session.list"}`)))
	f, err := c.read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.OpCode != gobwas.OpText || !strings.Contains(string(f.Payload), `"id":"b","error":{"code":-32000,"message":"call system.hello first"`) {
		t.Fatalf("reply %v %s", f.Header.OpCode, f.Payload)
	}
}

// TestKeepalive: a peer that answers pings stays connected over several
// intervals; one that stops answering is dropped after the pong timeout,
// and the server side's close callbacks run.
func TestKeepalive(t *testing.T) {
	s := newServer(t, ws.Options{PingInterval: 20 * time.Millisecond, PongTimeout: 100 * time.Millisecond})
	c := rawDial(t, s.url())
	srv := <-s.accepted
	closed := make(chan struct{})
	srv.OnClose(func() { close(closed) })

	var mu sync.Mutex
	answering, pings := true, 0
	answer := func() bool {
		mu.Lock()
		defer mu.Unlock()
		pings++
		return answering
	}
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, err := c.read(answer); err != nil {
				readErr <- err
				return
			}
		}
	}()
	for {
		mu.Lock()
		n := pings
		mu.Unlock()
		if n >= 5 {
			break
		}
		select {
		case <-closed:
			t.Fatal("a peer that answers pings was dropped")
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	answering = false
	mu.Unlock()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a peer that stopped answering pings is still connected")
	}
	select {
	case <-readErr:
	case <-time.After(10 * time.Second):
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
