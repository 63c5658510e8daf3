package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/ws"
)

// frameStream is a run of session.event WebSocket frames as a server
// sends them (unmasked text frames), rendered once: ends[i] is where the
// i-th frame ends in b.
type frameStream struct {
	b    []byte
	ends []int
}

const wsBenchSessionID = "01JBENCHSESSION0000000000000"

// renderEventFrames renders n message.delta events of one session,
// exactly the facade's bytes (codec.AppendStoredEvent inside
// jsonrpc.NotificationFrame), each in its WebSocket frame.
func renderEventFrames(n int) frameStream {
	var s frameStream
	ts := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	for i := range n {
		payload := fmt.Appendf(nil, `{"text":"d%d d%d d%d "}`, 3*i, 3*i+1, 3*i+2)
		params := codec.AppendStoredEvent(nil, wsBenchSessionID, int64(i+1), "message.delta", ts.Add(time.Duration(i)*time.Millisecond), payload, codec.Stored)
		frame := jsonrpc.NotificationFrame("session.event", params)
		s.b = append(s.b, 0x81) // FIN, text
		switch {
		case len(frame) < 126:
			s.b = append(s.b, byte(len(frame)))
		case len(frame) < 1<<16:
			s.b = append(s.b, 126, byte(len(frame)>>8), byte(len(frame)))
		default:
			panic("frame too long for the bench")
		}
		s.b = append(s.b, frame...)
		s.ends = append(s.ends, len(s.b))
	}
	return s
}

// frameServer is a WebSocket server from memory: it completes the
// handshake by hand, hands a start channel for the connection to conns,
// and then writes the frames of stream, cycling, as many as it is told on
// start, until start is closed; it costs next to nothing per frame, so
// that a client reading it measures itself.
func frameServer(t testing.TB, stream frameStream, conns chan<- chan int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Sec-WebSocket-Key")
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
			http.Error(w, "not a WebSocket handshake", http.StatusBadRequest)
			return
		}
		h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:]))
		if rw.Flush() != nil {
			return
		}
		go io.Copy(io.Discard, conn) // the client's close frame
		start := make(chan int)
		conns <- start
		for n := range start {
			per := len(stream.ends)
			for ; n >= per; n -= per {
				if _, err := conn.Write(stream.b); err != nil {
					return
				}
			}
			if n > 0 {
				if _, err := conn.Write(stream.b[:stream.ends[n-1]]); err != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// BenchmarkWSClientEvents is the bench's WebSocket client on its own: a
// server from memory sends pre-rendered session.event frames, and each
// sub-benchmark reads them one layer higher; ns/op and allocs/op are per
// event.
//
//   - socket: the frames read off the TCP connection (64 KiB reads, frame
//     headers followed): the floor of any client.
//   - conn: protocol/ws's Conn (the one WebSocket layer) reading into one
//     buffer, nothing else: the transport's floor.
//   - client: the bench's wsClient read loop, each envelope decoded and
//     handed to a callback that checks it as Replay's does: what the
//     client adds to a resume measured through it.
func BenchmarkWSClientEvents(b *testing.B) {
	stream := renderEventFrames(1024)
	conns := make(chan chan int)
	url := frameServer(b, stream, conns)
	ctx := context.Background()

	b.Run("socket", func(b *testing.B) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br := bufio.NewReaderSize(conn, 64<<10)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			b.Fatalf("handshake: %v %v", resp, err)
		}
		readFrames(b, conns, len(stream.ends), func() error {
			h0, err := br.ReadByte()
			if err != nil {
				return err
			}
			l, _ := br.ReadByte()
			size := int(l & 0x7f)
			if size == 126 {
				hi, _ := br.ReadByte()
				lo, _ := br.ReadByte()
				size = int(hi)<<8 | int(lo)
			}
			if _, err := br.Discard(size); err != nil || h0 != 0x81 {
				return fmt.Errorf("frame %#x: %v", h0, err)
			}
			return nil
		})
	})

	b.Run("conn", func(b *testing.B) {
		conn, err := dialWSConn(ctx, url, true)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		var buf []byte
		readFrames(b, conns, len(stream.ends), func() (err error) {
			buf, err = conn.ReadMessageInto(ctx, buf)
			return err
		})
	})

	b.Run("client", func(b *testing.B) {
		conn, err := dialWSConn(ctx, url, true)
		if err != nil {
			b.Fatal(err)
		}
		start := <-conns
		defer close(start)
		var notified, want atomic.Int64
		var bad atomic.Int64
		allIn := make(chan struct{}, 1)
		c := newWSClient(conn, func(ev eventRef, _ time.Time) {
			if ev.SessionID != wsBenchSessionID || ev.Seq <= 0 || ev.Kind != "message.delta" || ev.TS == "" {
				bad.Add(1)
			}
			if notified.Add(1) == want.Load() {
				allIn <- struct{}{}
			}
		})
		defer c.close()
		round := func(n int) {
			notified.Store(0)
			want.Store(int64(n))
			start <- n
			select {
			case <-allIn:
			case <-c.done:
				b.Fatalf("connection closed: %v", c.err)
			}
		}
		round(len(stream.ends)) // warm up
		b.ReportAllocs()
		b.ResetTimer()
		round(b.N)
		b.StopTimer()
		if bad.Load() != 0 {
			b.Fatalf("%d events with a wrong envelope", bad.Load())
		}
	})
}

// readFrames has frameServer send one round of warm-up frames (warm, as
// many as the stream holds) and then b.N, each read with read, timing the
// b.N.
func readFrames(b *testing.B, conns <-chan chan int, warm int, read func() error) {
	start := <-conns
	defer close(start)
	frames := func(n int) {
		start <- n
		for range n {
			if err := read(); err != nil {
				b.Fatal(err)
			}
		}
	}
	frames(warm)
	b.ReportAllocs()
	b.ResetTimer()
	frames(b.N)
}

// TestReadMessageInto: the facade's frames of every size, read by the
// bench's client into a reused buffer, arrive whole, whatever the buffer
// held before; a frame over the read limit fails the read; the server's
// close ends the reads with a normal closure.
func TestReadMessageInto(t *testing.T) {
	frames := [][]byte{
		[]byte(`{"a":1}`),
		{},
		[]byte(strings.Repeat("x", 511)),
		[]byte(strings.Repeat("y", 4096)),
		[]byte(strings.Repeat("z", 100_000)),
		[]byte(`{"b":2}`),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, ws.Options{Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			return
		}
		for _, f := range frames {
			if err := c.WriteMessage(r.Context(), f); err != nil {
				return
			}
		}
		c.Close()
	}))
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	for _, tc := range []struct {
		name string
		buf  []byte
	}{
		{"nil buffer", nil},
		{"small buffer", make([]byte, 3, 8)},
		{"large buffer", []byte(strings.Repeat("q", 200_000))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialForTest(t, url)
			buf := tc.buf
			for i, want := range frames {
				got, err := c.ReadMessageInto(context.Background(), buf)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if string(got) != string(want) {
					t.Fatalf("frame %d: %d bytes, want %d", i, len(got), len(want))
				}
				buf = got
			}
			if _, err := c.ReadMessageInto(context.Background(), buf); !errors.Is(err, io.EOF) {
				t.Fatalf("after the server's close: %v, want a normal closure", err)
			}
		})
	}
	t.Run("over the read limit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := ws.Dial(ctx, url, ws.Options{ReadLimit: 1000, ReadBufferSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		var buf []byte
		for i, want := range frames[:3] {
			got, err := c.ReadMessageInto(ctx, buf)
			if err != nil || string(got) != string(want) {
				t.Fatalf("frame %d: %d bytes, %v", i, len(got), err)
			}
			buf = got
		}
		var tooLarge *ws.ErrFrameTooLarge
		if _, err := c.ReadMessageInto(ctx, buf); !errors.As(err, &tooLarge) {
			t.Fatalf("a frame of 4096 bytes over a limit of 1000: %v", err)
		}
	})
}

func dialForTest(t *testing.T, url string) *ws.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialWSConn(ctx, url, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEnvelopeScan: the envelope of the facade's rendering is read in
// place, any other layout through scanEvent, and a session id or kind
// equal to the previous event's is its string again.
func TestEnvelopeScan(t *testing.T) {
	ts := time.Date(2026, 12, 1, 17, 0, 0, 123e6, time.UTC)
	facade := func(sid string, seq int64, kind, payload string, unstored bool) []byte {
		return codec.AppendStoredEvent(nil, sid, seq, kind, ts, []byte(payload), codec.DeliveryOf(unstored, false))
	}
	for _, tc := range []struct {
		name string
		obj  []byte
		want eventRef
		ok   bool
	}{
		{"facade", facade("s-1", 7, "message.delta", `{"text":"a } \" b"}`, false), eventRef{SessionID: "s-1", Seq: 7, Kind: "message.delta", TS: "2026-12-01T17:00:00.123Z"}, true},
		{"unstored", facade("s-1", 8, "message.delta", `{"text":"x"}`, true), eventRef{SessionID: "s-1", Seq: 8, Kind: "message.delta", TS: "2026-12-01T17:00:00.123Z"}, true},
		{"no payload", facade("s-2", 1, "turn.done", ``, false), eventRef{SessionID: "s-2", Seq: 1, Kind: "turn.done", TS: "2026-12-01T17:00:00.123Z"}, true},
		{"nested ts", facade("s-2", 2, "tool.result", `{"ts":"inner"}`, false), eventRef{SessionID: "s-2", Seq: 2, Kind: "tool.result", TS: "2026-12-01T17:00:00.123Z"}, true},
		{"other order", []byte(`{"seq":3,"kind":"k","sessionId":"s-3","ts":"t","payload":{}}`), eventRef{SessionID: "s-3", Seq: 3, Kind: "k", TS: "t"}, true},
		{"long seq", []byte(`{"sessionId":"s","seq":1234567890123456789,"kind":"k","payload":{},"ts":"t"}`), eventRef{SessionID: "s", Seq: 1234567890123456789, Kind: "k", TS: "t"}, true},
		{"seq too long", []byte(`{"sessionId":"s","seq":99999999999999999999,"kind":"k","payload":{},"ts":"t"}`), eventRef{}, false},
		{"no seq", []byte(`{"sessionId":"s","kind":"k","payload":{},"ts":"t"}`), eventRef{}, false},
		{"not an object", []byte(`[1,2]`), eventRef{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e envelope
			got, ok := e.scan(tc.obj)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v: %s", ok, tc.ok, tc.obj)
			}
			if !ok {
				return
			}
			if got.SessionID != tc.want.SessionID || got.Seq != tc.want.Seq || got.Kind != tc.want.Kind || got.TS != tc.want.TS {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	var e envelope
	a, _ := e.scan(facade("s-1", 1, "message.delta", `{}`, false))
	b, _ := e.scan(facade("s-1", 2, "message.delta", `{}`, false))
	if unsafe.StringData(a.SessionID) != unsafe.StringData(b.SessionID) || unsafe.StringData(a.Kind) != unsafe.StringData(b.Kind) {
		t.Error("the same session id and kind are new strings")
	}
	c, _ := e.scan(facade("s-2", 3, "turn.done", `{}`, false))
	if c.SessionID != "s-2" || c.Kind != "turn.done" || a.SessionID != "s-1" || a.TS != b.TS || a.TS != "2026-12-01T17:00:00.123Z" {
		t.Errorf("after a new session and kind: %+v, earlier %+v", c, a)
	}
}

// FuzzFacadeEnvelope: the in-place reader never panics, and what it reads
// from an object agrees with encoding/json where both apply (valid JSON,
// no escapes, each key once).
func FuzzFacadeEnvelope(f *testing.F) {
	f.Add(codec.AppendStoredEvent(nil, "s-1", 7, "message.delta", time.Unix(0, 0), []byte(`{"text":"w w "}`), codec.Stored))
	f.Add(codec.AppendStoredEvent(nil, "s-1", 8, "turn.done", time.Unix(0, 0), nil, codec.Unstored))
	f.Add([]byte(`{"sessionId":"s","seq":1,"kind":"k","payload":{"ts":"x"},"ts":"y"}`))
	f.Add([]byte(`{"sessionId":"s","seq":1,"kind":"k","payload":{},"x":{"ts":"y"}}`))
	f.Fuzz(func(t *testing.T, obj []byte) {
		sid, seq, kind, ts, ok := facadeEnvelope(obj)
		if !ok || bytes.IndexByte(obj, '\\') >= 0 {
			return
		}
		for _, k := range []string{`"sessionId"`, `"seq"`, `"kind"`, `"ts"`} {
			if bytes.Count(obj, []byte(k)) != 1 {
				return
			}
		}
		var full struct {
			SessionID string `json:"sessionId"`
			Seq       int64  `json:"seq"`
			Kind      string `json:"kind"`
			TS        string `json:"ts"`
		}
		if json.Unmarshal(obj, &full) != nil {
			return
		}
		if full.SessionID != string(sid) || full.Seq != seq || full.Kind != string(kind) || full.TS != string(ts) {
			t.Errorf("read %q %d %q %q, encoding/json says %+v: %s", sid, seq, kind, ts, full, obj)
		}
	})
}
