package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade/jsonrpc"
	"github.com/trellis-run/trellis/facade/rpcerr"
	"github.com/trellis-run/trellis/facade/ws"
	"github.com/trellis-run/trellis/version"
)

// Error is a protocol error answered by the daemon: {code, message, data:
// {code}}. Test its string code with errors.As and StringCode, or CodeOf.
type Error = rpcerr.Error

// ErrClosed is returned once the connection to the daemon is closed.
var ErrClosed = errors.New("client: connection to the daemon closed")

// CodeOf returns the protocol string code of an error returned by the
// daemon (e.g. "not_found"), or "" for any other error.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.StringCode()
	}
	return ""
}

// Options configure a Client; every field is optional.
type Options struct {
	// ClientVersion is sent in system.hello (default: this module's version).
	ClientVersion string
	// ClientKind is sent in system.hello, e.g. "cli".
	ClientKind string
	// ClientID is sent in system.hello; a stable id lets a reconnecting
	// client take back its sessions' approvals.
	ClientID string
	// Approve answers the daemon's approval.request calls. ctx ends when
	// the request's timeoutSec has passed or the client closes. nil denies
	// every request.
	Approve func(ctx context.Context, req ApprovalRequest) ApprovalAnswer
	// Notify receives the notifications other than session.event
	// (approval.pending, approval.resolved, job.event, ...), in arrival
	// order, from the connection's reader: it must not wait for a call.
	Notify func(method string, params json.RawMessage)
	// Log receives protocol anomalies; nil discards them.
	Log *slog.Logger
}

// ApprovalRequest is the params of approval.request (PROTOCOL.md §5).
type ApprovalRequest struct {
	RequestID     string          `json:"requestId"`
	SessionID     string          `json:"sessionId"`
	TurnID        string          `json:"turnId"`
	CallID        string          `json:"callId"`
	Tool          string          `json:"tool"`
	Args          json.RawMessage `json:"args"`
	PermissionTag string          `json:"permissionTag"`
	Risk          string          `json:"risk"`
	TimeoutSec    int             `json:"timeoutSec"`
	ScopeHint     string          `json:"scopeHint"`
	Note          string          `json:"note"`
}

// ApprovalAnswer is the result of approval.request.
type ApprovalAnswer struct {
	// Decision is "allow" or "deny".
	Decision string `json:"decision"`
	// Scope is "once" (or empty), "session", "project" or "always"; a
	// wider scope than once also adds an allowlist entry.
	Scope string `json:"scope,omitempty"`
	// Reason tells the model why, for a denial.
	Reason string `json:"reason,omitempty"`
}

// Hello is the result of system.hello.
type Hello struct {
	ProtocolVersion string   `json:"protocolVersion"`
	ServerVersion   string   `json:"serverVersion"`
	Capabilities    []string `json:"capabilities"`
	ConnectionID    string   `json:"connectionId"`
}

// Client is one authenticated connection to a daemon. Its methods may be
// called from any goroutine.
type Client struct {
	info  daemon.Info
	opts  Options
	conn  *jsonrpc.Conn
	hello Hello

	serveDone chan struct{}
	serveErr  error

	mu      sync.Mutex
	streams map[string]*stream // by session id
	closed  bool               // the connection ended; new streams start closed

	callMu    sync.Mutex
	calls     int           // calls waiting for their reply
	callStart chan struct{} // closed when a call starts
}

// Dial connects to the daemon of home (as named by its daemon.json) and
// completes system.hello. It fails with an error wrapping
// daemon.ErrNoDaemon when no daemon runs there.
func Dial(ctx context.Context, home string, opts Options) (*Client, error) {
	info, err := daemon.ReadInfo(home)
	if err != nil {
		return nil, err
	}
	return DialInfo(ctx, info, opts)
}

// DialInfo connects to the daemon described by info and completes
// system.hello.
func DialInfo(ctx context.Context, info daemon.Info, opts Options) (*Client, error) {
	if opts.ClientVersion == "" {
		opts.ClientVersion = version.Server
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	t, err := ws.Dial(ctx, fmt.Sprintf("ws://127.0.0.1:%d/ws", info.Port), ws.Options{Log: opts.Log})
	if err != nil {
		return nil, err
	}
	c := &Client{info: info, opts: opts, serveDone: make(chan struct{}), streams: map[string]*stream{}, callStart: make(chan struct{})}
	// Notifications are handled by the one reader, in arrival order: a
	// subscriber that does not keep up holds the reader, and the daemon
	// holds the session's events back, so none is ever dropped.
	c.conn = jsonrpc.NewConn(t, jsonrpc.HandlerFunc(c.handle), jsonrpc.Options{Log: opts.Log, OrderedNotifications: true})
	go func() {
		c.serveErr = c.conn.Serve(context.Background())
		c.closeStreams()
		close(c.serveDone)
	}()
	params := map[string]any{
		"token":           info.Token,
		"clientVersion":   opts.ClientVersion,
		"protocolVersion": version.Protocol,
	}
	if opts.ClientKind != "" {
		params["clientKind"] = opts.ClientKind
	}
	if opts.ClientID != "" {
		params["clientId"] = opts.ClientID
	}
	if err := c.Call(ctx, "system.hello", params, &c.hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("system.hello: %w", err)
	}
	return c, nil
}

// Info is the daemon.json the client connected with.
func (c *Client) Info() daemon.Info { return c.info }

// Hello is the daemon's answer to system.hello.
func (c *Client) Hello() Hello { return c.hello }

// Close closes the connection; subscriptions end with ErrClosed.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.serveDone
	return err
}

// Done is closed when the connection has closed (Close, or the daemon went
// away).
func (c *Client) Done() <-chan struct{} { return c.serveDone }

// Err tells why the connection ended once Done is closed: nil after Close
// or a normal close by the daemon, else the transport's error.
func (c *Client) Err() error {
	select {
	case <-c.serveDone:
		return c.serveErr
	default:
		return nil
	}
}

// Call invokes a protocol method. params is marshalled with encoding/json
// (nil sends {}); the result is decoded into result unless it is nil. A
// protocol error is an *Error.
func (c *Client) Call(ctx context.Context, method string, params any, result any) error {
	if params == nil {
		params = struct{}{}
	}
	c.callMu.Lock()
	c.calls++
	close(c.callStart)
	c.callStart = make(chan struct{})
	c.callMu.Unlock()
	defer func() {
		c.callMu.Lock()
		c.calls--
		c.callMu.Unlock()
	}()
	raw, err := c.conn.Call(ctx, method, params)
	if err != nil {
		if errors.Is(err, jsonrpc.ErrClosed) {
			return fmt.Errorf("%s: %w", method, ErrClosed)
		}
		return err
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(raw, result); err != nil {
		return fmt.Errorf("%s: decoding the result: %w", method, err)
	}
	return nil
}

// callWaiting tells the streams whether a call waits for its reply: the
// reader must then not wait for a slow subscriber (streamOwner).
func (c *Client) callWaiting() (bool, <-chan struct{}) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	return c.calls > 0, c.callStart
}

// fetchAfter returns a session's stored events after a seq (streamOwner).
func (c *Client) fetchAfter(ctx context.Context, sessionID string, after int64) ([]Event, error) {
	res, _, err := c.resume(ctx, sessionID, after)
	return res.Events, err
}

// handle receives the daemon's requests and notifications. Notifications
// come one at a time from the reader, in arrival order (a slow subscriber
// slows the reader down); requests run in their own goroutines.
func (c *Client) handle(ctx context.Context, _ *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
	switch method {
	case "session.event":
		ev, err := decodeEvent(params)
		if err != nil {
			c.opts.Log.Warn("client: bad session.event dropped", "err", err)
			return nil, nil
		}
		c.stream(ev.SessionID).add(ctx, ev)
		return nil, nil
	case "approval.request":
		var req ApprovalRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, rpcerr.InvalidParams("approval.request params: " + err.Error())
		}
		return c.approve(ctx, req), nil
	default:
		if c.opts.Notify != nil {
			c.opts.Notify(method, params)
			return nil, nil
		}
		return nil, rpcerr.MethodNotFound(method)
	}
}

func (c *Client) approve(ctx context.Context, req ApprovalRequest) ApprovalAnswer {
	if c.opts.Approve == nil {
		return ApprovalAnswer{Decision: "deny", Reason: "this client does not answer approval requests"}
	}
	timeout := time.Duration(req.TimeoutSec) * time.Second
	if timeout <= 0 {
		timeout = 300 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a := c.opts.Approve(ctx, req)
	if a.Decision != "allow" {
		a.Decision = "deny"
	}
	return a
}

// stream returns the event stream of a session, creating it (with no
// starting point yet) when this is its first event.
func (c *Client) stream(sessionID string) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.streams[sessionID]
	if !ok {
		s = newStream(sessionID, c)
		c.streams[sessionID] = s
		if c.closed {
			s.close(ErrClosed)
		}
	}
	return s
}

func (c *Client) closeStreams() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, s := range c.streams {
		s.close(ErrClosed)
	}
}
