package ws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Defaults of Options (PROTOCOL.md §2 limits and keepalive).
const (
	DefaultReadLimit    = 32 << 20
	DefaultPingInterval = 30 * time.Second
	DefaultPongTimeout  = 10 * time.Second
)

// Options configure Accept and Dial; zero fields take the defaults.
type Options struct {
	// ReadLimit is the largest frame read, in bytes; a larger frame closes
	// the connection with status 1009 (message too big).
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
	// HTTPClient makes the handshake (Dial only; nil = http.DefaultClient),
	// e.g. with the TLS configuration of a wss:// URL.
	HTTPClient *http.Client
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
// satisfies jsonrpc.Transport. Ping needs a reader: keep ReadMessage called
// (jsonrpc.Conn.Serve does).
type Conn struct {
	ws   *websocket.Conn
	opts Options
	hold *holdConn // the connection under ws when accepted (for WriteMessages)

	ctx    context.Context // ends the keepalive
	cancel context.CancelFunc
	pinger *time.Timer // the next keepalive ping (mu); no goroutine waits for it

	closeOnce sync.Once
	done      chan struct{}
	mu        sync.Mutex
	onClose   []func()
	closed    bool
}

// Accept checks the origin policy, upgrades the request and starts the
// keepalive. On failure it has already answered the request (403 for a
// refused origin).
func Accept(w http.ResponseWriter, r *http.Request, opts Options) (*Conn, error) {
	opts = opts.withDefaults()
	if err := CheckOrigin(r, opts.AllowedOrigins); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return nil, err
	}
	hw := &holdHijacker{ResponseWriter: w, limit: opts.ReadLimit}
	c, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		// The origin policy above is ours and stricter; do not apply
		// the library's same-host rule on top of it.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return nil, err
	}
	conn := newConn(c, opts)
	conn.hold = hw.conn
	return conn, nil
}

// Dial connects to a WebSocket URL (ws:// or wss://), for Go clients and
// tests. Pings are off unless opts.PingInterval is positive.
func Dial(ctx context.Context, url string, opts Options) (*Conn, error) {
	if opts.PingInterval == 0 {
		opts.PingInterval = -1
	}
	opts = opts.withDefaults()
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: opts.Header, HTTPClient: opts.HTTPClient})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("ws: dial %s: %s: %w", url, resp.Status, err)
		}
		return nil, fmt.Errorf("ws: dial %s: %w", url, err)
	}
	return newConn(c, opts), nil
}

func newConn(c *websocket.Conn, opts Options) *Conn {
	c.SetReadLimit(opts.ReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	conn := &Conn{ws: c, opts: opts, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if opts.PingInterval > 0 {
		conn.mu.Lock()
		conn.pinger = time.AfterFunc(opts.PingInterval, conn.keepalive)
		conn.mu.Unlock()
	}
	return conn
}

// keepalive runs every PingInterval (from a timer, so that an idle
// connection has no goroutine waiting for it): it pings and drops the
// connection when a pong does not come back within PongTimeout.
func (c *Conn) keepalive() {
	if c.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.PongTimeout)
	err := c.ws.Ping(ctx)
	cancel()
	if err != nil {
		if c.ctx.Err() == nil {
			c.opts.Log.Info("ws: peer did not answer a ping; closing", slog.Any("error", err))
		}
		c.finish(func() error { return c.ws.CloseNow() })
		return
	}
	c.mu.Lock()
	if !c.closed {
		c.pinger.Reset(c.opts.PingInterval)
	}
	c.mu.Unlock()
}

// ReadMessage returns the next data frame. Binary frames are returned as
// they are and read as UTF-8 text by the layer above. A normal close by the
// peer is io.EOF.
func (c *Conn) ReadMessage(ctx context.Context) ([]byte, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, c.readFailed(err)
	}
	return b, nil
}

// readFailed closes the connection after a failed read and returns the
// read's error: io.EOF for a normal close by the peer.
func (c *Conn) readFailed(err error) error {
	c.finish(func() error { return c.ws.CloseNow() })
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return io.EOF
	}
	return err
}

// WriteMessage writes one text frame (with one system call when accepted).
func (c *Conn) WriteMessage(ctx context.Context, data []byte) error {
	if c.hold != nil {
		return c.WriteMessages(ctx, [][]byte{data})
	}
	return c.ws.Write(ctx, websocket.MessageText, data)
}

// Close closes the connection with a normal-closure handshake and runs the
// OnClose callbacks.
func (c *Conn) Close() error {
	var err error
	c.finish(func() error {
		err = c.ws.Close(websocket.StatusNormalClosure, "")
		return err
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// CloseWithReason closes the connection with status 1008 (policy
// violation) and reason, for a client that broke a rule of the server.
func (c *Conn) CloseWithReason(reason string) error {
	var err error
	c.finish(func() error {
		err = c.ws.Close(websocket.StatusPolicyViolation, reason)
		return err
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
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

// finish closes the connection once, with closeFn, then runs callbacks.
func (c *Conn) finish(closeFn func() error) {
	c.closeOnce.Do(func() {
		c.cancel()
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
