package ws

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// streamConn is a net.Conn that reads a fixed byte stream and records
// what is written to it.
type streamConn struct {
	net.Conn // nil: only the methods below are called
	r        io.Reader
	out      bytes.Buffer
}

func (c *streamConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *streamConn) Close() error                     { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
func (c *streamConn) SetDeadline(t time.Time) error    { return nil }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// FuzzReadMessage: whatever bytes a client sends, the server's reader
// returns whole messages within the read limit or an error, never panics,
// and everything it writes back (pongs, a close frame) parses as frames.
func FuzzReadMessage(f *testing.F) {
	frame := func(fr ws.Frame) []byte {
		b, err := ws.CompileFrame(ws.MaskFrameWith(fr, [4]byte{1, 2, 3, 4}))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(frame(ws.NewTextFrame([]byte(`{"jsonrpc":"2.0"}`))))
	f.Add(append(frame(ws.NewFrame(ws.OpText, false, []byte("ab"))), append(frame(ws.NewPingFrame([]byte("p"))), frame(ws.NewFrame(ws.OpContinuation, true, []byte("cd")))...)...))
	f.Add(frame(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "bye"))))
	f.Add(frame(ws.NewBinaryFrame(bytes.Repeat([]byte("x"), 300))))
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, stream []byte) {
		const limit = 256
		nc := &streamConn{r: bytes.NewReader(stream)}
		c := newConn(nc, bufio.NewReaderSize(nc, 16), false, Options{ReadLimit: limit, PingInterval: -1, Log: slog.New(slog.DiscardHandler)}.withDefaults())
		for range 64 {
			msg, err := c.ReadMessage(context.Background())
			if err != nil {
				break
			}
			if len(msg) > limit {
				t.Fatalf("a message of %d bytes over the limit of %d", len(msg), limit)
			}
		}
		out := bufio.NewReader(bytes.NewReader(nc.out.Bytes()))
		for {
			hdr, err := ws.ReadHeader(out)
			if err == io.EOF {
				break
			}
			if err == nil {
				_, err = io.CopyN(io.Discard, out, hdr.Length)
			}
			if err != nil {
				t.Fatalf("the server wrote something that is not a frame: %v (%q)", err, nc.out.Bytes())
			}
			if hdr.Masked || !hdr.Fin || !hdr.OpCode.IsControl() {
				t.Fatalf("the server answered with %+v: want unmasked whole control frames", hdr)
			}
		}
	})
}
