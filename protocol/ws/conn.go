package ws

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

// Defaults of Options (PROTOCOL.md §2 limits and keepalive).
const (
	DefaultReadLimit    = 32 << 20
	DefaultPingInterval = 30 * time.Second
	DefaultPongTimeout  = 10 * time.Second
)

// Options configure Accept and Dial; zero fields take the defaults.
type Options struct {
	// ReadLimit is the largest message read, in bytes; a frame that would
	// pass it closes the connection with status 1009 (message too big) as
	// soon as its header announces it.
	ReadLimit int64
	// PingInterval is the time between pings; a negative value disables
	// them (for clients, whose server pings).
	PingInterval time.Duration
	// PongTimeout is how long a ping waits for its pong before the
	// connection is dropped.
	PongTimeout time.Duration
	// AllowedOrigins are the web origins allowed besides loopback pages
	// (see CheckOrigin). Accept only.
	AllowedOrigins []string
	// Header is sent with the handshake (Dial only), e.g. Origin.
	Header http.Header
	// TLS configures wss:// connections (Dial only); nil means the
	// system's roots.
	TLS *tls.Config
	// ReadBufferSize is the size of a dialled connection's read buffer
	// (Dial only; default 1 KiB, what a connection that mostly waits
	// needs). A client that reads a stream of small messages takes many
	// per system call with a larger one: the bench's event readers use
	// 64 KiB (docs/performance.md, replay).
	ReadBufferSize int
	// Log receives keepalive failures; nil means slog.Default().
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ReadLimit <= 0 {
		o.ReadLimit = DefaultReadLimit
	}
	if o.PingInterval == 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.PongTimeout <= 0 {
		o.PongTimeout = DefaultPongTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// Conn is one WebSocket connection carrying whole JSON-RPC frames; it
// satisfies jsonrpc.Transport. One goroutine reads (ReadMessage); any
// number write, one at a time. Ping needs a reader: keep ReadMessage called
// (jsonrpc.Conn.Serve does), since pongs and the peer's close arrive
// through it.
type Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	client bool // a client masks its frames; a server's must not be
	opts   Options

	// The reader's state (one reader at a time).
	rhdr [ws.MaxHeaderSize]byte
	ctrl [125]byte // a control frame's payload

	wmu       sync.Mutex // one writer at a time, data and control frames alike
	wbuf      bytes.Buffer
	whdr      [ws.MaxHeaderSize]byte
	closeSent bool // no frame may follow a close frame (wmu)

	closeOnce sync.Once
	done      chan struct{}
	mu        sync.Mutex
	onClose   []func()
	closed    bool
	pinger    *time.Timer // the next ping, or the deadline of the ping sent (mu)
	awaiting  bool        // a ping went out and its pong has not come back (mu)
}

// Read buffer of a connection: large frames bypass it, so it only needs
// to hold headers and small messages (and it stays with the connection
// for its life, idle or not).
const readBufSize = 1024

// maxHeld is the largest write buffer kept between writes, and the size
// above which a lone frame is written from the caller's bytes.
const maxHeld = 64 << 10

// closeGrace is how long a closing side waits for the peer's close frame
// before it drops the TCP connection.
const closeGrace = time.Second

// Accept checks the origin policy, upgrades the request and starts the
// keepalive. On failure it has already answered the request (403 for a
// refused origin, 400 for a bad handshake).
func Accept(w http.ResponseWriter, r *http.Request, opts Options) (*Conn, error) {
	opts = opts.withDefaults()
	if err := CheckOrigin(r, opts.AllowedOrigins); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return nil, err
	}
	nc, rw, _, err := ws.HTTPUpgrader{}.Upgrade(r, w)
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		return nil, err
	}
	// A small reader of our own instead of the server's 4 KiB one, with
	// whatever the client sent after its handshake in front of it.
	var src io.Reader = nc
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Reader.Peek(n)
		src = io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc)
	}
	return newConn(nc, bufio.NewReaderSize(src, readBufSize), false, opts), nil
}

// Dial connects to a WebSocket URL (ws:// or wss://), for Go clients and
// tests. Pings are off unless opts.PingInterval is positive.
func Dial(ctx context.Context, url string, opts Options) (*Conn, error) {
	if opts.PingInterval == 0 {
		opts.PingInterval = -1
	}
	opts = opts.withDefaults()
	size := opts.ReadBufferSize
	if size <= 0 {
		size = readBufSize
	}
	d := ws.Dialer{TLSConfig: opts.TLS, ReadBufferSize: size}
	if len(opts.Header) > 0 {
		d.Header = ws.HandshakeHeaderHTTP(opts.Header)
	}
	nc, br, _, err := d.Dial(ctx, url)
	if err != nil {
		var se ws.StatusError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("ws: dial %s: %d %s: %w", url, int(se), http.StatusText(int(se)), err)
		}
		return nil, fmt.Errorf("ws: dial %s: %w", url, err)
	}
	if br == nil {
		br = bufio.NewReaderSize(nc, size)
	}
	return newConn(nc, br, true, opts), nil
}

func newConn(nc net.Conn, br *bufio.Reader, client bool, opts Options) *Conn {
	c := &Conn{nc: nc, br: br, client: client, opts: opts, done: make(chan struct{})}
	if opts.PingInterval > 0 {
		c.mu.Lock()
		c.pinger = time.AfterFunc(opts.PingInterval, c.keepalive)
		c.mu.Unlock()
	}
	return c
}

// keepalive runs from a timer (an idle connection has no goroutine waiting
// for it): every PingInterval it pings, and PongTimeout later, if the pong
// has not come back, it drops the connection.
func (c *Conn) keepalive() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.awaiting {
		c.mu.Unlock()
		c.opts.Log.Info("ws: peer did not answer a ping; closing")
		c.finish(c.nc.Close)
		return
	}
	c.awaiting = true
	c.pinger.Reset(c.opts.PongTimeout)
	c.mu.Unlock()
	if err := c.writeControl(ws.OpPing, nil, time.Now().Add(c.opts.PongTimeout)); err != nil {
		c.finish(c.nc.Close)
	}
}

// ponged notes a pong: the next ping is due PingInterval from now.
func (c *Conn) ponged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pinger != nil && c.awaiting && !c.closed {
		c.awaiting = false
		c.pinger.Reset(c.opts.PingInterval)
	}
}

// CloseError is ReadMessage's error when the peer closed the connection
// with a status other than normal closure or going away.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("ws: closed by the peer with status %d: %q", e.Code, e.Reason)
}

// ErrFrameTooLarge is the read error of a message over the read limit: the
// connection is closed with status 1009 as soon as a frame header announces
// it, before its payload is read.
type ErrFrameTooLarge struct{ Length, Limit uint64 }

func (e *ErrFrameTooLarge) Error() string {
	return fmt.Sprintf("ws: a frame header announces %d bytes, over the limit of %d: connection closed", e.Length, e.Limit)
}

// errProtocol is a frame RFC 6455 forbids; the connection is closed with
// status 1002.
type errProtocol string

func (e errProtocol) Error() string { return "ws: protocol error: " + string(e) }

// ReadMessage returns the next data message. Binary messages are returned
// as they are and read as UTF-8 text by the layer above. A normal close by
// the peer is io.EOF. Cancelling ctx closes the connection.
func (c *Conn) ReadMessage(ctx context.Context) ([]byte, error) {
	return c.ReadMessageInto(ctx, nil)
}

// ReadMessageInto is ReadMessage appending the message to buf[:0], for a
// reader that reuses one buffer.
func (c *Conn) ReadMessageInto(ctx context.Context, buf []byte) ([]byte, error) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = c.nc.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	msg, err := c.readMessage(buf[:0])
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, c.readFailed(err)
	}
	return msg, nil
}

func (c *Conn) readMessage(msg []byte) ([]byte, error) {
	inMessage := false
	for {
		h, err := ws.ReadHeaderBuffer(c.br, c.rhdr[:])
		if err != nil {
			return nil, err
		}
		switch {
		case h.Rsv != 0:
			return nil, errProtocol("reserved bits set (no extension was negotiated)")
		case h.Masked == c.client:
			return nil, errProtocol("a client must mask its frames and a server must not")
		case h.OpCode.IsReserved():
			return nil, errProtocol(fmt.Sprintf("reserved opcode %#x", byte(h.OpCode)))
		case h.OpCode.IsControl():
			if err := c.readControl(h); err != nil {
				return nil, err
			}
			continue
		case h.OpCode == ws.OpContinuation && !inMessage:
			return nil, errProtocol("a continuation frame with no message to continue")
		case h.OpCode != ws.OpContinuation && inMessage:
			return nil, errProtocol("a new message inside a fragmented one")
		}
		if total := uint64(len(msg)) + uint64(h.Length); total > uint64(c.opts.ReadLimit) {
			e := &ErrFrameTooLarge{Length: total, Limit: uint64(c.opts.ReadLimit)}
			c.closeWith(ws.StatusMessageTooBig, fmt.Sprintf("frame of %d bytes over the limit of %d", e.Length, e.Limit))
			return nil, e
		}
		if msg, err = c.readPayload(msg, h); err != nil {
			return nil, err
		}
		if c.isCloseSent() {
			// Closing: a message that crossed our close frame is dropped.
			msg, inMessage = msg[:0], false
			continue
		}
		inMessage = true
		if h.Fin {
			return msg, nil
		}
	}
}

// readPayload appends a frame's payload to msg, unmasked. The buffer grows
// as bytes arrive, never by what a header merely announces.
func (c *Conn) readPayload(msg []byte, h ws.Header) ([]byte, error) {
	const step = 64 << 10
	start := len(msg)
	for rest := int(h.Length); rest > 0; {
		n := min(rest, step)
		if cap(msg)-len(msg) < n {
			msg = append(msg[:cap(msg)], make([]byte, n)...)[:len(msg)]
		}
		if _, err := io.ReadFull(c.br, msg[len(msg):len(msg)+n]); err != nil {
			return nil, err
		}
		msg = msg[:len(msg)+n]
		rest -= n
	}
	if h.Masked {
		ws.Cipher(msg[start:], h.Mask, 0)
	}
	return msg, nil
}

// readControl handles a ping, pong or close frame.
func (c *Conn) readControl(h ws.Header) error {
	if !h.Fin || h.Length > int64(len(c.ctrl)) {
		return errProtocol("a control frame fragmented or over 125 bytes")
	}
	p := c.ctrl[:h.Length]
	if _, err := io.ReadFull(c.br, p); err != nil {
		return err
	}
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	switch h.OpCode {
	case ws.OpPing:
		return c.writeControl(ws.OpPong, p, time.Now().Add(closeGrace))
	case ws.OpPong:
		c.ponged()
		return nil
	}
	// The peer's close frame: answer it (unless ours went first), then end.
	code, reason := ws.ParseCloseFrameData(p)
	if code.Empty() || code == ws.StatusNoStatusRcvd {
		c.closeWith(ws.StatusNormalClosure, "")
		return io.EOF
	}
	c.closeWith(code, "")
	if code == ws.StatusNormalClosure || code == ws.StatusGoingAway {
		return io.EOF
	}
	return &CloseError{Code: int(code), Reason: reason}
}

// readFailed closes the connection after a failed read and returns the
// read's error: io.EOF for a normal close by the peer.
func (c *Conn) readFailed(err error) error {
	var pe errProtocol
	if errors.As(err, &pe) {
		c.closeWith(ws.StatusProtocolError, string(pe))
	}
	if !c.isCloseSent() {
		c.finish(c.nc.Close)
		return err
	}
	// A close frame went out: the grace timer drops the connection.
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Our close frame's answer never came: the close is done anyway.
		return io.EOF
	}
	return err
}

func (c *Conn) isCloseSent() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.closeSent
}

// WriteMessage writes one text message.
func (c *Conn) WriteMessage(ctx context.Context, data []byte) error {
	return c.WriteMessages(ctx, [][]byte{data})
}

// WriteMessages writes frames as text messages, in order, in one system
// call for a batch (a lone frame over maxHeld is written from its own
// bytes, without a copy, when it needs no mask).
func (c *Conn) WriteMessages(ctx context.Context, frames [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return net.ErrClosed
	}
	deadline, _ := ctx.Deadline()
	_ = c.nc.SetWriteDeadline(deadline)
	if len(frames) == 1 && len(frames[0]) > maxHeld && !c.client {
		c.wbuf.Reset()
		if err := ws.WriteHeaderBuffer(&c.wbuf, c.header(ws.OpText, len(frames[0])), c.whdr[:]); err != nil {
			return err
		}
		bufs := net.Buffers{c.wbuf.Bytes(), frames[0]}
		_, err := bufs.WriteTo(c.nc)
		return err
	}
	c.wbuf.Reset()
	for _, f := range frames {
		if err := c.appendFrame(ws.OpText, f); err != nil {
			return err
		}
	}
	_, err := c.nc.Write(c.wbuf.Bytes())
	if c.wbuf.Cap() > maxHeld {
		c.wbuf = bytes.Buffer{} // do not keep a burst's buffer for the connection's life
	}
	return err
}

// header is the header of an unfragmented frame of n bytes, with a fresh
// mask on a client's.
func (c *Conn) header(op ws.OpCode, n int) ws.Header {
	h := ws.Header{Fin: true, OpCode: op, Length: int64(n)}
	if c.client {
		h.Masked, h.Mask = true, ws.NewMask()
	}
	return h
}

// appendFrame appends one frame to the write buffer (wmu held).
func (c *Conn) appendFrame(op ws.OpCode, p []byte) error {
	h := c.header(op, len(p))
	if err := ws.WriteHeaderBuffer(&c.wbuf, h, c.whdr[:]); err != nil {
		return err
	}
	start := c.wbuf.Len()
	c.wbuf.Write(p)
	if h.Masked {
		ws.Cipher(c.wbuf.Bytes()[start:], h.Mask, 0)
	}
	return nil
}

// writeControl writes one control frame within deadline.
func (c *Conn) writeControl(op ws.OpCode, p []byte, deadline time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return net.ErrClosed
	}
	return c.writeControlLocked(op, p, deadline)
}

func (c *Conn) writeControlLocked(op ws.OpCode, p []byte, deadline time.Time) error {
	c.wbuf.Reset()
	if err := c.appendFrame(op, p); err != nil {
		return err
	}
	_ = c.nc.SetWriteDeadline(deadline)
	_, err := c.nc.Write(c.wbuf.Bytes())
	_ = c.nc.SetWriteDeadline(time.Time{})
	return err
}

// closeWith sends a close frame (once; the first one decides the status)
// and leaves the peer closeGrace to answer it before the TCP connection is
// dropped. The peer's answer reaches a running reader, which drops it at
// once.
func (c *Conn) closeWith(code ws.StatusCode, reason string) {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	c.wmu.Lock()
	first := !c.closeSent
	if first {
		c.closeSent = true
		_ = c.writeControlLocked(ws.OpClose, ws.NewCloseFrameBody(code, reason), time.Now().Add(closeGrace))
	}
	c.wmu.Unlock()
	if first {
		_ = c.nc.SetReadDeadline(time.Now().Add(closeGrace))
		time.AfterFunc(closeGrace, func() { c.nc.Close() })
	} else {
		// Both sides have sent their close frame: the close is complete.
		c.nc.Close()
	}
	c.finish(func() error { return nil })
}

// Close closes the connection with a normal-closure handshake and runs the
// OnClose callbacks.
func (c *Conn) Close() error {
	c.closeWith(ws.StatusNormalClosure, "")
	return nil
}

// CloseWithReason closes the connection with status 1008 (policy
// violation) and reason, for a client that broke a rule of the server.
func (c *Conn) CloseWithReason(reason string) error {
	c.closeWith(ws.StatusPolicyViolation, reason)
	return nil
}

// Done is closed when the connection has closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// OnClose registers f to run once the connection has closed (at once if it
// already has): the hook for subscriptions tied to the connection's life.
func (c *Conn) OnClose(f func()) {
	c.mu.Lock()
	if !c.closed {
		c.onClose = append(c.onClose, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

// finish marks the connection closed once, with closeFn, then runs the
// callbacks.
func (c *Conn) finish(closeFn func() error) {
	c.closeOnce.Do(func() {
		if err := closeFn(); err != nil {
			c.opts.Log.Debug("ws: close", slog.Any("error", err))
		}
		c.mu.Lock()
		c.closed = true
		if c.pinger != nil {
			c.pinger.Stop()
		}
		callbacks := c.onClose
		c.onClose = nil
		c.mu.Unlock()
		close(c.done)
		for _, f := range callbacks {
			f()
		}
	})
}
