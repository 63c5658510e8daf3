package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

// Error is a JSON-RPC error object {code, message, data: {code, ...}}; it is
// errcode.Error, the facade's one error type.
type Error = errcode.Error

// Transport carries whole JSON-RPC frames, one message per frame. ReadMessage
// is called from one goroutine; WriteMessage from one other goroutine.
// ReadMessage returns io.EOF when the peer closed normally.
type Transport interface {
	ReadMessage(ctx context.Context) ([]byte, error)
	WriteMessage(ctx context.Context, data []byte) error
	Close() error
}

// BatchWriter is a Transport that can write several frames at once (in
// order, each its own message) with fewer system calls; the writer uses it
// for the frames that are ready together.
type BatchWriter interface {
	WriteMessages(ctx context.Context, frames [][]byte) error
}

// Handler runs one client → server call. result is nil (rendered null), a
// json.RawMessage (written as is), a proto.Message (rendered by
// codec.Marshal) or any other value (rendered by encoding/json). ctx is
// cancelled when the connection closes. For a notification the result and
// error are dropped.
type Handler interface {
	Handle(ctx context.Context, c *Conn, method string, params json.RawMessage) (result any, err *Error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, c *Conn, method string, params json.RawMessage) (any, *Error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, c *Conn, method string, params json.RawMessage) (any, *Error) {
	return f(ctx, c, method, params)
}

// ErrClosed is returned by Call and Notify once the connection is closed.
var ErrClosed = errors.New("jsonrpc: connection closed")

// Defaults of Options (PROTOCOL.md §2 limits).
const (
	DefaultMaxInFlight  = 1024
	DefaultMaxBatch     = 100
	DefaultRetryAfterMs = 100
	DefaultWriteQueue   = 256
	DefaultWriteTimeout = 30 * time.Second
)

// Options tune a Conn; zero fields take the defaults above.
type Options struct {
	// MaxInFlight bounds the requests (and notifications) being handled at
	// once; beyond it a request is answered overloaded at once.
	MaxInFlight int
	// MaxBatch bounds the entries of one batch.
	MaxBatch int
	// RetryAfterMs is the data.retryAfterMs of an overloaded reply.
	RetryAfterMs int
	// WriteQueue bounds the frames waiting for the writer; senders block
	// (with their context) while it is full.
	WriteQueue int
	// WriteTimeout bounds one frame's write; a write that takes longer
	// closes the connection (the peer is not reading).
	WriteTimeout time.Duration
	// Log receives protocol anomalies (ignored responses, dropped
	// notifications); nil means slog.Default().
	Log *slog.Logger
	// Errors masks internal failures (handler panics, unencodable results);
	// nil means grpcerr.Default.
	Errors *grpcerr.Mapper
	// OrderedNotifications runs each incoming notification on the reading
	// goroutine, one at a time in arrival order, outside the in-flight
	// limit: a handler that blocks stops the reading, which holds the peer
	// back through the transport (backpressure) instead of dropping. For a
	// client, whose notifications are ordered event streams; requests still
	// run concurrently.
	OrderedNotifications bool
}

func (o Options) withDefaults() Options {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.RetryAfterMs <= 0 {
		o.RetryAfterMs = DefaultRetryAfterMs
	}
	if o.WriteQueue <= 0 {
		o.WriteQueue = DefaultWriteQueue
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Errors == nil {
		o.Errors = grpcerr.Default
	}
	return o
}

// Conn is one JSON-RPC connection. Create it with NewConn, run Serve, and
// use Call and Notify from any goroutine.
type Conn struct {
	t    Transport
	h    Handler
	opts Options

	ctx    context.Context // cancelled on close; parent of every request's context
	cancel context.CancelFunc
	// readCtx is cancelled only after the transport's Close returned, so
	// that a WebSocket close handshake can still read the peer's answer.
	readCtx    context.Context
	readCancel context.CancelFunc
	done       chan struct{}
	wg         sync.WaitGroup

	// The write queue: frames for the writer, in order. The writer
	// goroutine runs only while there is something to write, and the
	// queue's memory is taken when frames come: an idle connection owns
	// neither.
	qmu     sync.Mutex
	queue   [][]byte
	writing bool          // a writer goroutine runs (qmu)
	space   chan struct{} // closed when the writer takes frames; nil until a sender waits (qmu)

	inFlight atomic.Int64
	nextID   atomic.Uint64
	queued   atomic.Int64 // frames accepted by send
	written  atomic.Int64 // frames the writer has finished with

	mu       sync.Mutex
	pending  map[string]chan reply // server → client calls by id
	onClose  []func()
	closed   bool
	closeErr error
}

// reply is a client's answer to a server → client request.
type reply struct {
	result json.RawMessage
	err    *Error
}

// answer is what Call returns for r.
func (r reply) answer() (json.RawMessage, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.result, nil
}

// NewConn returns a connection over t whose calls go to h. Notify works
// before Serve (a writer starts when there is a frame to write); Serve
// reads.
func NewConn(t Transport, h Handler, opts Options) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	readCtx, readCancel := context.WithCancel(context.Background())
	c := &Conn{
		t:          t,
		h:          h,
		opts:       opts.withDefaults(),
		ctx:        ctx,
		cancel:     cancel,
		readCtx:    readCtx,
		readCancel: readCancel,
		done:       make(chan struct{}),
		pending:    map[string]chan reply{},
	}
	return c
}

// Context is cancelled when the connection closes: tie the connection's
// subscriptions to it.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when the connection closes.
func (c *Conn) Done() <-chan struct{} { return c.done }

// OnClose registers f to run once the connection has closed (at once if it
// already has). Callbacks run in registration order, in one goroutine.
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

// Drain waits, within ctx, until no request is running and every queued
// frame is written, so that a graceful close loses no reply (the answer to
// system.shutdown, say). It does not stop new requests; the caller closes
// the listener first.
func (c *Conn) Drain(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.inFlight.Load() == 0 && c.written.Load() >= c.queued.Load() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return ErrClosed
		case <-tick.C:
		}
	}
}

// Close closes the connection: request contexts are cancelled, pending
// calls fail with ErrClosed, the transport is closed, OnClose callbacks run.
// Frames still queued are dropped.
func (c *Conn) Close() error {
	c.closeWith(ErrClosed)
	return nil
}

func (c *Conn) closeWith(cause error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = cause
	callbacks := c.onClose
	c.onClose = nil
	c.pending = map[string]chan reply{}
	c.mu.Unlock()

	c.cancel()
	close(c.done)
	if err := c.t.Close(); err != nil {
		c.opts.Log.Debug("jsonrpc: closing transport", slog.Any("error", err))
	}
	c.readCancel()
	for _, f := range callbacks {
		f()
	}
}

// Serve reads frames until the connection closes (the peer left, Close was
// called, ctx was cancelled or a write failed), then waits for the running
// handlers to return. It returns nil for a normal end, else the cause.
func (c *Conn) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { c.closeWith(ctx.Err()) })
	defer stop()
	for {
		data, err := c.t.ReadMessage(c.readCtx)
		if err != nil {
			c.closeWith(err)
			break
		}
		c.handleFrame(data)
	}
	c.wg.Wait()
	c.mu.Lock()
	err := c.closeErr
	c.mu.Unlock()
	if errors.Is(err, ErrClosed) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// handleFrame answers one frame: a single message or a batch, whose replies
// go out together as one array (no frame when nothing needs an answer).
func (c *Conn) handleFrame(data []byte) {
	msgs, batch, ferr := decodeFrame(data, c.opts.MaxBatch)
	if ferr != nil {
		c.enqueue(responseFrame(nullID, nil, ferr))
		return
	}
	if !batch {
		c.handleMessage(msgs[0], func(frame []byte) {
			if frame != nil {
				c.enqueue(frame)
			}
		})
		return
	}
	replies := make([][]byte, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		m.inBatch = true
		wg.Add(1)
		c.handleMessage(m, func(frame []byte) {
			replies[i] = frame
			wg.Done()
		})
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		wg.Wait()
		out := []byte{'['}
		for _, r := range replies {
			if r == nil {
				continue
			}
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, r...)
		}
		if len(out) > 1 {
			c.enqueue(append(out, ']'))
		}
	}()
}

// handleMessage runs one message; done receives its reply frame, or nil
// when it gets none, exactly once (possibly later, from another goroutine).
func (c *Conn) handleMessage(m *message, done func(frame []byte)) {
	switch {
	case m.isResponse:
		c.route(m)
		done(nil)
	case m.invalid != nil && (m.id != nil || m.invalid.Code == errcode.NumericInvalidRequest):
		done(responseFrame(m.id, nil, m.invalid))
	case m.invalid != nil:
		c.opts.Log.Warn("jsonrpc: notification dropped", slog.String("method", m.method), slog.String("error", m.invalid.Message))
		done(nil)
	default:
		c.start(m, done)
	}
}

// start runs a request or notification in its own goroutine, within the
// in-flight limit. A request counts as in flight until its reply is queued.
func (c *Conn) start(m *message, done func([]byte)) {
	if m.id == nil && c.opts.OrderedNotifications {
		if _, err := c.invoke(m); err != nil {
			c.opts.Log.Debug("jsonrpc: notification failed", slog.String("method", m.method), slog.String("error", err.Error()))
		}
		done(nil)
		return
	}
	if c.inFlight.Add(1) > int64(c.opts.MaxInFlight) {
		c.inFlight.Add(-1)
		if m.id == nil {
			c.opts.Log.Warn("jsonrpc: notification dropped: too many in flight", slog.String("method", m.method))
			done(nil)
			return
		}
		done(responseFrame(m.id, nil, errcode.NewOverloaded(c.opts.RetryAfterMs)))
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.inFlight.Add(-1)
		var after afterReply
		hook := &after
		if m.inBatch {
			hook = nil // the batch's replies are queued later, together
		}
		result, err := c.invokeWith(m, hook)
		if m.id == nil {
			if err != nil {
				c.opts.Log.Debug("jsonrpc: notification failed", slog.String("method", m.method), slog.String("error", err.Error()))
			}
			done(nil)
			after.run()
			return
		}
		done(responseFrame(m.id, result, err))
		after.run()
	}()
}

// invoke calls the handler and encodes its result; a panic or an
// unencodable result becomes a masked internal error.
func (c *Conn) invoke(m *message) (result []byte, rerr *Error) {
	return c.invokeWith(m, nil)
}

func (c *Conn) invokeWith(m *message, after *afterReply) (result []byte, rerr *Error) {
	defer func() {
		if r := recover(); r != nil {
			result = nil
			rerr = c.opts.Errors.Internal(c.ctx, fmt.Errorf("panic in handler of %s: %v\n%s", m.method, r, debug.Stack()))
		}
	}()
	ctx := c.ctx
	if m.trace.Traceparent != "" {
		ctx = context.WithValue(ctx, traceKey{}, m.trace)
	}
	if after != nil {
		ctx = context.WithValue(ctx, afterReplyKey{}, after)
	}
	v, herr := c.h.Handle(ctx, c, m.method, m.params)
	if herr != nil {
		return nil, herr
	}
	b, err := encodeValue(v)
	if err != nil {
		return nil, c.opts.Errors.Internal(c.ctx, fmt.Errorf("encoding the result of %s: %w", m.method, err))
	}
	return b, nil
}

// encodeValue renders a result or params value (see Handler).
func encodeValue(v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return nullID, nil
	case json.RawMessage:
		if len(x) == 0 {
			return nullID, nil
		}
		return x, nil
	case proto.Message:
		return codec.Marshal(x), nil
	default:
		return marshalNoEscape(x)
	}
}

// enqueue queues a reply frame; it waits while the queue is full and gives
// up when the connection closes.
func (c *Conn) enqueue(frame []byte) {
	_ = c.send(c.ctx, frame)
}

func (c *Conn) send(ctx context.Context, frame []byte) error {
	for {
		ok, space, err := c.offer(frame, true)
		if ok || err != nil {
			return err
		}
		if err := c.waitForRoom(ctx, space); err != nil {
			return err
		}
	}
}

// waitForRoom waits until space is closed (the writer made room in the
// queue), the connection closes or ctx ends.
func (c *Conn) waitForRoom(ctx context.Context, space <-chan struct{}) error {
	select {
	case <-space:
		return nil
	case <-c.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// offer queues frame if the queue has room, starting the writer if none
// runs. Otherwise, with wait, it returns a channel closed when the writer
// makes room.
func (c *Conn) offer(frame []byte, wait bool) (ok bool, space <-chan struct{}, err error) {
	select {
	case <-c.done:
		return false, nil, ErrClosed
	default:
	}
	c.qmu.Lock()
	if len(c.queue) >= c.opts.WriteQueue {
		if wait && c.space == nil {
			c.space = make(chan struct{})
		}
		space = c.space
		c.qmu.Unlock()
		return false, space, nil
	}
	c.queue = append(c.queue, frame)
	c.queued.Add(1)
	start := !c.writing
	c.writing = true
	c.qmu.Unlock()
	if start {
		go c.writeLoop()
	}
	return true, nil, nil
}

// maxCoalesce bounds the frames one batched write carries.
const maxCoalesce = 64

// writeLoop is the one writer: frames go out in queue order, and it ends
// when the queue is empty. With a BatchWriter transport, the frames already
// queued when a write starts go out together.
func (c *Conn) writeLoop() {
	bw, _ := c.t.(BatchWriter)
	var batch [][]byte
	for {
		select {
		case <-c.done:
			c.qmu.Lock()
			c.writing = false
			c.queue = nil
			c.qmu.Unlock()
			return
		default:
		}
		c.qmu.Lock()
		if len(c.queue) == 0 {
			c.writing = false
			if cap(c.queue) > 16 {
				c.queue = nil // a burst's queue is not kept for an idle connection
			}
			c.qmu.Unlock()
			return
		}
		n := 1
		if bw != nil {
			n = min(len(c.queue), maxCoalesce)
		}
		batch = append(batch[:0], c.queue[:n]...)
		rest := copy(c.queue, c.queue[n:])
		clear(c.queue[rest:])
		c.queue = c.queue[:rest]
		if c.space != nil {
			close(c.space)
			c.space = nil
		}
		c.qmu.Unlock()

		ctx, cancel := context.WithTimeout(c.ctx, c.opts.WriteTimeout)
		var err error
		if len(batch) == 1 {
			err = c.t.WriteMessage(ctx, batch[0])
		} else {
			err = bw.WriteMessages(ctx, batch)
		}
		cancel()
		c.written.Add(int64(len(batch)))
		clear(batch)
		if err != nil {
			c.qmu.Lock()
			c.writing = false
			c.queue = nil
			c.qmu.Unlock()
			c.closeWith(fmt.Errorf("jsonrpc: write: %w", err))
			return
		}
	}
}

// TrySend queues a complete frame if the write queue has room and reports
// whether it did; it never blocks. The facade's fan-out uses it so that one
// slow connection cannot hold back the others.
func (c *Conn) TrySend(frame []byte) bool {
	ok, _, _ := c.offer(frame, false)
	return ok
}

// SendFrame queues a complete frame (a notification built by the caller),
// waiting within ctx while the write queue is full.
func (c *Conn) SendFrame(ctx context.Context, frame []byte) error {
	return c.send(ctx, frame)
}

// SendFrames queues complete frames in order, as many at once as the
// write queue has room for, waiting within ctx while it is full.
func (c *Conn) SendFrames(ctx context.Context, frames [][]byte) error {
	for len(frames) > 0 {
		select {
		case <-c.done:
			return ErrClosed
		default:
		}
		c.qmu.Lock()
		n := min(len(frames), c.opts.WriteQueue-len(c.queue))
		if n <= 0 {
			if c.space == nil {
				c.space = make(chan struct{})
			}
			space := c.space
			c.qmu.Unlock()
			if err := c.waitForRoom(ctx, space); err != nil {
				return err
			}
			continue
		}
		c.queue = append(c.queue, frames[:n]...)
		c.queued.Add(int64(n))
		start := !c.writing
		c.writing = true
		c.qmu.Unlock()
		if start {
			go c.writeLoop()
		}
		frames = frames[n:]
	}
	return nil
}

// NotificationFrame builds the frame of a notification whose params are
// already JSON.
func NotificationFrame(method string, params []byte) []byte {
	b := make([]byte, 0, 40+len(method)+len(params))
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	m, _ := marshalNoEscape(method)
	b = append(b, m...)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	return append(b, '}')
}

// route hands a client's response to the Call waiting for its id.
func (c *Conn) route(m *message) {
	var id string
	if json.Unmarshal(m.id, &id) != nil {
		c.opts.Log.Warn("jsonrpc: response ignored: its id is not one of ours", slog.String("id", string(m.id)))
		return
	}
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch == nil {
		c.opts.Log.Warn("jsonrpc: response ignored: no request is waiting for it", slog.String("id", string(m.id)))
		return
	}
	r := reply{result: m.result}
	if m.errObj != nil {
		r.err = &Error{}
		if err := json.Unmarshal(m.errObj, r.err); err != nil {
			r.err = errcode.New(errcode.Internal, "the client answered with a malformed error object")
		}
	}
	ch <- r
}

// Call sends a server → client request (ids "s1", "s2", … per connection)
// and waits for its response. It returns the result, or an error: an *Error
// when the client answered with one, ErrClosed when the connection closed
// first, or ctx's error. params is marshalled like a Handler result; nil
// omits params.
func (c *Conn) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := "s" + strconv.FormatUint(c.nextID.Add(1), 10)
	frame, err := requestFrame(strconv.Quote(id), method, params)
	if err != nil {
		return nil, err
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if err := c.send(ctx, frame); err != nil {
		forget()
		return nil, err
	}
	select {
	case r := <-ch:
		return r.answer()
	case <-ctx.Done():
		forget()
		err = ctx.Err()
	case <-c.done:
		err = ErrClosed
	}
	// A response read before the close or the end of ctx is the answer:
	// select picks at random among what is ready.
	select {
	case r := <-ch:
		return r.answer()
	default:
		return nil, err
	}
}

// Notify sends a server → client notification; it waits (within ctx) while
// the write queue is full.
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	frame, err := requestFrame("", method, params)
	if err != nil {
		return err
	}
	return c.send(ctx, frame)
}

// requestFrame builds a request (id != "") or notification frame.
func requestFrame(id, method string, params any) ([]byte, error) {
	b := []byte(`{"jsonrpc":"2.0",`)
	if id != "" {
		b = append(b, `"id":`...)
		b = append(b, id...)
		b = append(b, ',')
	}
	m, err := marshalNoEscape(method)
	if err != nil {
		return nil, err
	}
	b = append(b, `"method":`...)
	b = append(b, m...)
	if params != nil {
		p, err := encodeValue(params)
		if err != nil {
			return nil, fmt.Errorf("jsonrpc: params of %s: %w", method, err)
		}
		b = append(b, `,"params":`...)
		b = append(b, p...)
	}
	return append(b, '}'), nil
}

// TraceContext is the W3C trace context a client sent with a request.
type TraceContext struct {
	Traceparent, Tracestate string
}

type traceKey struct{}

// RequestTrace returns the trace context the client sent with the request
// that ctx serves (a Handler's ctx); zero when it sent none.
func RequestTrace(ctx context.Context) TraceContext {
	t, _ := ctx.Value(traceKey{}).(TraceContext)
	return t
}

type afterReplyKey struct{}

// afterReply holds the functions to run once a request's reply is queued.
type afterReply struct{ fs []func() }

func (a *afterReply) run() {
	for _, f := range a.fs {
		f()
	}
}

// AfterReply arranges for f to run once the reply to the request that ctx
// serves (a Handler's ctx) has been queued for writing, so that what f
// sends follows the reply on the connection. It reports false, and does
// nothing, when ctx is not a request's that supports it (a batch entry, a
// notification run in order); the caller then does f's work itself.
func AfterReply(ctx context.Context, f func()) bool {
	a, _ := ctx.Value(afterReplyKey{}).(*afterReply)
	if a == nil {
		return false
	}
	a.fs = append(a.fs, f)
	return true
}
