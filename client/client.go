package client

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/strict"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/version"
)

// Error is a protocol error answered by the daemon: {code, message, data:
// {code}}. Test its string code with errors.As and StringCode, or CodeOf.
type Error = errcode.Error

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

// ErrUnreachable is returned by calls (and ends subscriptions) when the
// connection to the daemon is down and could not be made again.
var ErrUnreachable = errors.New("daemon unreachable")

// ConnState is a change of a reconnecting client's connection, reported to
// Options.OnConnState.
type ConnState string

// The connection states.
const (
	// Disconnected: the connection dropped; calls wait for the reconnect.
	Disconnected ConnState = "disconnected"
	// Reconnecting: an attempt to connect again failed; the client retries.
	Reconnecting ConnState = "reconnecting"
	// Reconnected: a new connection is up and every subscription resumed.
	Reconnected ConnState = "reconnected"
	// GaveUp: no connection within Options.ReconnectFor; calls fail with
	// ErrUnreachable and subscriptions end with it.
	GaveUp ConnState = "gave-up"
)

// Options configure a Client; every field is optional.
type Options struct {
	// ClientVersion is sent in system.hello (default: this module's version).
	ClientVersion string
	// ClientKind is sent in system.hello, e.g. "cli".
	ClientKind string
	// ClientID is sent in system.hello; a stable id lets a reconnecting
	// client take back its sessions' approvals. A reconnecting client
	// without one makes one up.
	ClientID string
	// Approve answers the daemon's approval.request calls. ctx ends when
	// the request's timeoutSec has passed or the client closes. nil denies
	// every request.
	Approve func(ctx context.Context, req ApprovalRequest) ApprovalAnswer
	// Ask answers the daemon's question.request calls: the agent's
	// questions (its ask_user tool). ctx ends when the question's
	// timeoutSec has passed or the client closes. nil declines every
	// question.
	Ask func(ctx context.Context, q QuestionRequest) QuestionAnswer
	// ToolCall runs the calls of the tools this client lent (tool.register,
	// Calls().ToolRegister): the daemon's tool.call requests. ctx ends
	// when the client closes. nil fails every call.
	ToolCall func(ctx context.Context, call ToolCall) ToolReply
	// Notify receives the notifications other than session.event
	// (approval.pending, approval.resolved, job.event, ...), in arrival
	// order, from the connection's reader: it must not wait for a call.
	Notify func(method string, params json.RawMessage)
	// Log receives protocol anomalies; nil discards them.
	Log *slog.Logger
	// Key is an API key (key.create) sent in system.hello instead of
	// daemon.json's token: the client then acts as the key's principal.
	Key string

	// Reconnect makes the client connect again when the connection drops
	// (the daemon restarted, say), with backoff, re-reading Home's
	// daemon.json for a new port and token, and resume every subscription
	// from its last delivered seq: no event is lost or delivered twice.
	// Calls made meanwhile wait for the new connection. A mutating call
	// (one that takes an operation id) whose answer was lost with the old
	// connection is made again on the new one with the same operation id,
	// so it acts once (docs/protocol.md, "Operation ids"); other calls
	// whose answer was lost fail with ErrUnreachable.
	Reconnect bool
	// ReconnectFor bounds how long a reconnecting client tries before it
	// gives up (default 2 minutes).
	ReconnectFor time.Duration
	// Home is the home directory whose daemon.json names the daemon (Dial
	// sets it); without it a reconnect uses the first daemon.json again.
	Home string
	// OnConnState is told of connection changes of a reconnecting client
	// (err is why the connection dropped or the attempt failed).
	OnConnState func(state ConnState, err error)
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
	// ScopeHint is the suggested scope of an allow (once, session,
	// project, always or site).
	ScopeHint string `json:"scopeHint"`
	Note      string `json:"note"`
	// Pattern is the allowlist pattern a wider scope adds ("" = none).
	Pattern string `json:"pattern"`
}

// ToolCall is the params of tool.call: the model called a tool this
// client lent.
type ToolCall struct {
	SessionID string          `json:"sessionId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolReply is the result of tool.call: what the model reads, and whether
// the call failed.
type ToolReply struct {
	Output  string `json:"output"`
	IsError bool   `json:"isError,omitempty"`
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

// QuestionRequest is the params of question.request: one to four
// questions the agent asks, each with options to choose from.
type QuestionRequest struct {
	QuestionID string     `json:"questionId"`
	SessionID  string     `json:"sessionId"`
	TurnID     string     `json:"turnId"`
	CallID     string     `json:"callId"`
	Questions  []Question `json:"questions"`
	TimeoutSec int        `json:"timeoutSec"`
}

// Question is one question of a QuestionRequest.
type Question struct {
	Question string           `json:"question"`
	Header   string           `json:"header,omitempty"`
	Options  []QuestionOption `json:"options"`
	// Multiple: several options may be chosen.
	Multiple bool `json:"multiple,omitempty"`
}

// QuestionOption is one answer a question offers.
type QuestionOption struct {
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
}

// QuestionAnswer is the result of question.request: an answer per
// question, in order (option labels, or the person's own words), or
// Declined.
type QuestionAnswer struct {
	Answers  []AnswerValues `json:"answers,omitempty"`
	Declined bool           `json:"declined,omitempty"`
	Reason   string         `json:"reason,omitempty"`
}

// AnswerValues answers one question.
type AnswerValues struct {
	Values []string `json:"values"`
}

// Hello is the result of system.hello.
type Hello struct {
	ProtocolVersion string   `json:"protocolVersion"`
	ServerVersion   string   `json:"serverVersion"`
	Capabilities    []string `json:"capabilities"`
	ConnectionID    string   `json:"connectionId"`
	Limits          struct {
		// OperationWindowMs is how long the daemon keeps operation
		// receipts; 0 from a daemon that takes no operation ids.
		OperationWindowMs int64 `json:"operationWindowMs"`
	} `json:"limits"`
}

// Client is one authenticated connection to a daemon (or, with
// Options.Reconnect, a series of them). Its methods may be called from any
// goroutine.
type Client struct {
	opts Options

	serveDone chan struct{} // closed when the client has ended for good
	serveErr  error

	mu      sync.Mutex
	info    daemonfile.Info
	conn    *jsonrpc.Conn // the current connection; nil while down
	up      chan struct{} // closed while a connection is up
	hello   Hello
	closing bool               // Close was called
	closeCh chan struct{}      // closed by Close
	ended   error              // why the client ended (set before serveDone closes)
	streams map[string]*stream // by session id
	closed  bool               // the client ended; new streams start closed

	callMu    sync.Mutex
	calls     int           // calls waiting for their reply
	callStart chan struct{} // closed when a call starts
}

// Dial connects to the daemon of home (as named by its daemon.json) and
// completes system.hello. It fails with an error wrapping
// daemonfile.ErrNoDaemon when no daemon runs there.
func Dial(ctx context.Context, home string, opts Options) (*Client, error) {
	info, err := daemonfile.Read(home)
	if err != nil {
		return nil, err
	}
	opts.Home = home
	return DialInfo(ctx, info, opts)
}

// DialInfo connects to the daemon described by info and completes
// system.hello.
func DialInfo(ctx context.Context, info daemonfile.Info, opts Options) (*Client, error) {
	if opts.ClientVersion == "" {
		opts.ClientVersion = version.Server
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Reconnect && opts.ClientID == "" {
		opts.ClientID = "go-" + randomID()
	}
	if opts.ReconnectFor <= 0 {
		opts.ReconnectFor = 2 * time.Minute
	}
	c := &Client{info: info, opts: opts, serveDone: make(chan struct{}), up: make(chan struct{}), closeCh: make(chan struct{}), streams: map[string]*stream{}, callStart: make(chan struct{})}
	conn, hello, err := c.open(ctx, info)
	if err != nil {
		return nil, err
	}
	c.conn, c.hello = conn, hello
	close(c.up)
	go c.watch(conn)
	return c, nil
}

// open dials the daemon of info and completes system.hello on the new
// connection.
func (c *Client) open(ctx context.Context, info daemonfile.Info) (*jsonrpc.Conn, Hello, error) {
	var hello Hello
	_, wsBase, hc, err := BaseURLs(info)
	if err != nil {
		return nil, hello, err
	}
	opts := ws.Options{Log: c.opts.Log}
	if tr, ok := hc.Transport.(*http.Transport); ok {
		opts.TLS = tr.TLSClientConfig // the daemon's pinned certificate, for wss://
	}
	t, err := ws.Dial(ctx, wsBase+"/ws", opts)
	if err != nil {
		return nil, hello, err
	}
	// Notifications are handled by the one reader, in arrival order: a
	// subscriber that does not keep up holds the reader, and the daemon
	// holds the session's events back, so none is ever dropped.
	conn := jsonrpc.NewConn(t, jsonrpc.HandlerFunc(c.handle), jsonrpc.Options{Log: c.opts.Log, OrderedNotifications: true})
	served := make(chan struct{})
	go func() {
		_ = conn.Serve(context.Background())
		close(served)
	}()
	token := info.Token
	if c.opts.Key != "" {
		token = c.opts.Key
	}
	params := map[string]any{
		"token":           token,
		"clientVersion":   c.opts.ClientVersion,
		"protocolVersion": version.Protocol,
	}
	if c.opts.ClientKind != "" {
		params["clientKind"] = c.opts.ClientKind
	}
	if c.opts.ClientID != "" {
		params["clientId"] = c.opts.ClientID
	}
	if err := c.rawCall(ctx, conn, "system.hello", params, &hello); err != nil {
		conn.Close()
		<-served
		return nil, hello, fmt.Errorf("system.hello: %w", err)
	}
	return conn, hello, nil
}

// watch waits for conn to end, then ends the client, or reconnects.
func (c *Client) watch(conn *jsonrpc.Conn) {
	<-conn.Done()
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
		c.up = make(chan struct{})
	}
	closing := c.closing
	c.mu.Unlock()
	cause := errors.New("the connection closed")
	if closing || !c.opts.Reconnect {
		c.end(ErrClosed, nil)
		return
	}
	c.state(Disconnected, cause)
	c.reconnect()
}

// reconnect connects again with backoff, re-reading daemon.json, until it
// succeeds, the client is closed or ReconnectFor has passed.
func (c *Client) reconnect() {
	deadline := time.Now().Add(c.opts.ReconnectFor)
	backoff := 50 * time.Millisecond
	for {
		c.mu.Lock()
		closing, info := c.closing, c.info
		c.mu.Unlock()
		if closing {
			c.end(ErrClosed, nil)
			return
		}
		var err error
		if c.opts.Home != "" {
			var fresh daemonfile.Info
			if fresh, err = daemonfile.Read(c.opts.Home); err == nil {
				info = fresh
			}
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			go func() {
				select {
				case <-c.closeCh:
					cancel()
				case <-ctx.Done():
				}
			}()
			var conn *jsonrpc.Conn
			var hello Hello
			conn, hello, err = c.open(ctx, info)
			if err == nil {
				err = c.resumeAll(ctx, conn)
				if err != nil {
					conn.Close()
				}
			}
			cancel()
			if err == nil {
				c.mu.Lock()
				if c.closing {
					c.mu.Unlock()
					conn.Close()
					c.end(ErrClosed, nil)
					return
				}
				c.info, c.conn, c.hello = info, conn, hello
				close(c.up)
				c.mu.Unlock()
				c.state(Reconnected, nil)
				go c.watch(conn)
				return
			}
		}
		if time.Now().After(deadline) {
			gave := fmt.Errorf("%w: no connection to the daemon for %v (last error: %v)", ErrUnreachable, c.opts.ReconnectFor, err)
			c.state(GaveUp, gave)
			c.end(gave, gave)
			return
		}
		c.state(Reconnecting, err)
		select {
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff/2)+1))):
		case <-c.closeCh:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// resumeAll subscribes the new connection to every started stream, from the
// last event each has (session.resume), and adds the stored events after it.
func (c *Client) resumeAll(ctx context.Context, conn *jsonrpc.Conn) error {
	c.mu.Lock()
	streams := make([]*stream, 0, len(c.streams))
	for _, s := range c.streams {
		streams = append(streams, s)
	}
	c.mu.Unlock()
	for _, s := range streams {
		err := s.refill(func(after int64) ([]Event, error) {
			return c.resumeOn(ctx, conn, s.id, after)
		})
		if err != nil {
			return fmt.Errorf("resuming session %s: %w", s.id, err)
		}
	}
	return nil
}

// state reports a connection change.
func (c *Client) state(st ConnState, err error) {
	c.opts.Log.Info("client: connection "+string(st), "err", err)
	if c.opts.OnConnState != nil {
		c.opts.OnConnState(st, err)
	}
}

// end ends the client for good: streams end with streamErr, Err tells err.
func (c *Client) end(streamErr, err error) {
	c.mu.Lock()
	if c.ended != nil {
		c.mu.Unlock()
		return
	}
	c.ended = streamErr
	c.serveErr = err
	c.closed = true
	for _, s := range c.streams {
		s.close(streamErr)
	}
	c.mu.Unlock()
	close(c.serveDone)
}

// Info is the daemon.json of the daemon the client is (or was last)
// connected to.
func (c *Client) Info() daemonfile.Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Hello is the daemon's answer to the last system.hello.
func (c *Client) Hello() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// closeDrain bounds how long Close waits for the answers the client is
// giving (an approval, a question's answer, a lent tool's result) to reach
// the daemon.
const closeDrain = time.Second

// Close closes the connection; subscriptions end with ErrClosed. An answer
// the client's callbacks are giving is written first: Close waits for the
// running callbacks and the queued replies, at most a second, so that an
// approval given just before a program quits still reaches the daemon.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closing {
		c.closing = true
		close(c.closeCh)
	}
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeDrain)
		_ = conn.Drain(ctx) // past the bound, or closed already: close anyway
		cancel()
		conn.Close()
	}
	<-c.serveDone
	return nil
}

// Done is closed when the client has ended: after Close, when the daemon
// went away (without Reconnect), or when reconnecting gave up.
func (c *Client) Done() <-chan struct{} { return c.serveDone }

// Err tells why the client ended once Done is closed: nil after Close or a
// closed connection, an error wrapping ErrUnreachable when reconnecting
// gave up.
func (c *Client) Err() error {
	select {
	case <-c.serveDone:
		return c.serveErr
	default:
		return nil
	}
}

// current returns the connection to call on, waiting (within ctx) while a
// reconnecting client is down.
func (c *Client) current(ctx context.Context) (*jsonrpc.Conn, error) {
	for {
		c.mu.Lock()
		conn, up, ended := c.conn, c.up, c.ended
		c.mu.Unlock()
		if ended != nil {
			return nil, ended
		}
		if conn != nil {
			return conn, nil
		}
		select {
		case <-up:
		case <-c.serveDone:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUnreachable, ctx.Err())
		}
	}
}

// Call invokes a protocol method. params is marshalled with encoding/json
// (nil sends {}); the result is decoded into result unless it is nil. A
// protocol error is an *Error. While a reconnecting client is down the call
// waits for the new connection (within ctx).
//
// A mutating method's call carries an operation id: ctx's (WithOperationID)
// or, when the daemon keeps receipts, a new one; a reconnecting client
// makes the call again with the same id when the connection dropped before
// the answer, until it gets one or ctx ends.
func (c *Client) Call(ctx context.Context, method string, params any, result any) error {
	id, given := ctx.Value(operationIDKey{}).(string)
	if mutating[method] && !given && c.keepsReceipts() {
		id, given = NewOperationID(), true
	}
	if !mutating[method] || !given {
		conn, err := c.current(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		return c.rawCall(ctx, conn, method, params, result)
	}
	p, err := withOperationID(params, id)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	var lost *jsonrpc.Conn // the connection the last try's answer was lost with
	for {
		conn, err := c.current(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if conn == lost {
			// watch has not seen it end yet: give it a moment.
			select {
			case <-time.After(5 * time.Millisecond):
				continue
			case <-ctx.Done():
				return fmt.Errorf("%s: %w: %w", method, ErrUnreachable, ctx.Err())
			}
		}
		err = c.rawCall(ctx, conn, method, p, result)
		if c.opts.Reconnect && errors.Is(err, ErrUnreachable) && ctx.Err() == nil && c.Err() == nil {
			lost = conn
			continue // current() waits for the reconnect, or ends with the client
		}
		return err
	}
}

type operationIDKey struct{}

// WithOperationID returns ctx carrying an operation id for the mutating
// call made with it (docs/protocol.md, "Operation ids"): a repeat of the
// call with the same id within the daemon's window answers the first
// call's outcome instead of acting again. Use one id per logical
// operation, the same on every retry of it.
func WithOperationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, operationIDKey{}, id)
}

// NewOperationID returns a new random operation id.
func NewOperationID() string { return "go-" + randomID() + randomID() }

// keepsReceipts reports whether the daemon said in system.hello that it
// keeps operation receipts (an older one refuses operationId).
func (c *Client) keepsReceipts() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello.Limits.OperationWindowMs > 0
}

// withOperationID returns params (a JSON object once marshalled; nil is
// {}) with operationId set to id.
func withOperationID(params any, id string) (json.RawMessage, error) {
	if params == nil {
		params = struct{}{}
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("params must be a JSON object to carry an operation id, not %s", strict.DescribeJSON(b))
	}
	fields["operationId"], _ = json.Marshal(id)
	return json.Marshal(fields)
}

// rawCall calls method on conn.
func (c *Client) rawCall(ctx context.Context, conn *jsonrpc.Conn, method string, params any, result any) error {
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
	raw, err := conn.Call(ctx, method, params)
	if err != nil {
		if errors.Is(err, jsonrpc.ErrClosed) {
			if c.opts.Reconnect {
				return fmt.Errorf("%s: %w: the connection dropped before the answer came", method, ErrUnreachable)
			}
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
// A call lost with a dropped connection is made again on the next one
// (session.resume changes nothing that a repeat would harm).
func (c *Client) fetchAfter(ctx context.Context, sessionID string, after int64) ([]Event, error) {
	for {
		res, _, err := c.resume(ctx, sessionID, after)
		if err != nil && errors.Is(err, ErrUnreachable) && ctx.Err() == nil && c.Err() == nil {
			continue // current() waits for the reconnect, or ends with the client
		}
		return res.Events, err
	}
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
			return nil, errcode.NewInvalidParams("approval.request params: " + err.Error())
		}
		return c.approve(ctx, req), nil
	case "tool.call":
		var call ToolCall
		if err := json.Unmarshal(params, &call); err != nil {
			return nil, errcode.NewInvalidParams("tool.call params: " + err.Error())
		}
		if c.opts.ToolCall == nil {
			return ToolReply{Output: "this client runs no lent tools", IsError: true}, nil
		}
		return c.opts.ToolCall(ctx, call), nil
	case "question.request":
		var q QuestionRequest
		if err := json.Unmarshal(params, &q); err != nil {
			return nil, errcode.NewInvalidParams("question.request params: " + err.Error())
		}
		return c.ask(ctx, q), nil
	default:
		if c.opts.Notify != nil {
			c.opts.Notify(method, params)
			return nil, nil
		}
		return nil, errcode.NewMethodNotFound(method)
	}
}

func (c *Client) approve(ctx context.Context, req ApprovalRequest) ApprovalAnswer {
	if c.opts.Approve == nil {
		return ApprovalAnswer{Decision: "deny", Reason: "this client does not answer approval requests"}
	}
	ctx, cancel := context.WithTimeout(ctx, answerTimeout(req.TimeoutSec))
	defer cancel()
	a := c.opts.Approve(ctx, req)
	if a.Decision != "allow" {
		a.Decision = "deny"
	}
	return a
}

func (c *Client) ask(ctx context.Context, q QuestionRequest) QuestionAnswer {
	if c.opts.Ask == nil {
		return QuestionAnswer{Declined: true, Reason: "this client does not answer questions"}
	}
	ctx, cancel := context.WithTimeout(ctx, answerTimeout(q.TimeoutSec))
	defer cancel()
	a := c.opts.Ask(ctx, q)
	if a.Declined {
		a.Answers = nil
	}
	return a
}

// answerTimeout is how long the client may take over a request the daemon
// puts to it: the request's timeoutSec, else 300 s.
func answerTimeout(sec int) time.Duration {
	if sec <= 0 {
		return 300 * time.Second
	}
	return time.Duration(sec) * time.Second
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
			s.close(c.ended)
		}
	}
	return s
}

// randomID returns 16 random hex digits.
func randomID() string {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
