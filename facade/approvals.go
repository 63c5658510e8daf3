package facade

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// approverReadyTimeout bounds how long a connection's first session call
// waits for its origin's ready.
const approverReadyTimeout = 5 * time.Second

type attachStream = grpc.BidiStreamingClient[trellisv1.AttachRequest, trellisv1.AttachResponse]

// approvals is the facade's one approver stream (ApprovalService.Attach)
// for all its WebSocket connections. A connection's origin (its connection
// id) is added with a start when it first acts on a session and removed
// with a detach when it closes; one goroutine reads the stream and routes
// each approval request to the connection of its origin, whose answer goes
// back on the same stream. The stream is opened with the first origin and
// kept for the facade's life, reopened after a failure with a start for
// every origin still attached. Connections that never act on a session
// cost nothing here.
type approvals struct {
	s *Server
	// readyTimeout bounds a connection's wait for its origin's ready
	// (approverReadyTimeout; shorter in tests).
	readyTimeout time.Duration

	mu      sync.Mutex
	origins map[string]*wsConn         // attached connections, by connection id
	waiting map[string]chan struct{}   // origins whose ready has not come on the current stream
	asks    map[string]askState        // request id → its running ask
	queue   []*trellisv1.AttachRequest // messages for the sender, in order
	wake    chan struct{}              // capacity 1: the queue grew
	live    bool                       // a stream is open: sends go to the queue
	gen     int                        // counts streams opened, to drop answers meant for an older one
	running bool                       // the stream's goroutine runs
	off     bool                       // the runtime does not serve Attach
	streams int                        // streams opened so far
}

// askState is one approval request being put to a connection.
type askState struct {
	origin string
	cancel context.CancelFunc
	done   chan struct{} // closed once the ask queued its decision, or will not
}

func newApprovals(s *Server) *approvals {
	return &approvals{s: s, readyTimeout: approverReadyTimeout, origins: map[string]*wsConn{}, waiting: map[string]chan struct{}{},
		asks: map[string]askState{}, wake: make(chan struct{}, 1)}
}

// add makes c the approver of the sessions it originates and returns a
// channel closed once its origin is ready (or will not be). A connection
// already attached gets nil.
func (a *approvals) add(c *wsConn) (ready <-chan struct{}, first bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.origins[c.id] == c {
		// Attached, or attaching: a call that comes while the first one
		// waits for the ready waits too; once a wait has ended (even by its
		// timeout), calls do not wait again until the origin is re-added.
		if ch := a.waiting[c.id]; ch != nil && !c.approverWaited {
			return ch, false
		}
		return nil, false
	}
	c.approverWaited = false
	ch := make(chan struct{})
	if a.off || a.s.ctx.Err() != nil {
		close(ch)
		return ch, false
	}
	first = !c.approverHooked
	c.approverHooked = true
	a.origins[c.id] = c
	a.waiting[c.id] = ch
	if a.live {
		a.enqueueLocked(startMsg(c))
	}
	if !a.running {
		a.running = true
		go a.run()
	}
	return ch, first
}

// waited records that a call of c waited for its origin's ready: later
// calls do not wait again.
func (a *approvals) waited(c *wsConn) {
	a.mu.Lock()
	c.approverWaited = true
	a.mu.Unlock()
}

// remove detaches a closed connection's origin: its pending requests are
// denied by the runtime. The asks in flight on it end first, and an answer
// that came before the close is queued before the detach: a client that
// answers and then closes at once (a chat that quits right after the user
// said yes) has its answer taken, not the detach's deny.
func (a *approvals) remove(c *wsConn) {
	a.mu.Lock()
	if a.origins[c.id] != c {
		a.mu.Unlock()
		return
	}
	delete(a.origins, c.id)
	if ch := a.waiting[c.id]; ch != nil {
		close(ch)
		delete(a.waiting, c.id)
	}
	var asking []askState
	for id, st := range a.asks {
		if st.origin == c.id {
			asking = append(asking, st)
			delete(a.asks, id)
		}
	}
	a.mu.Unlock()
	for _, st := range asking {
		st.cancel() // the connection is closed: its calls end at once, with the answers that came
		<-st.done
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Re-added meanwhile (a client reconnecting with the same id): its
	// attach took the origin over, and a detach now would end the new one.
	if a.origins[c.id] == nil && a.live {
		a.enqueueLocked(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Detach{Detach: &trellisv1.AttachDetach{OriginId: c.id}}})
	}
}

// stats reports the approver streams the facade opened so far and the
// origins (connections) attached on the open one.
func (a *approvals) stats() (streams, attached int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live {
		for id := range a.origins {
			if a.waiting[id] == nil {
				attached++
			}
		}
	}
	return a.streams, attached
}

func startMsg(c *wsConn) *trellisv1.AttachRequest {
	start := &trellisv1.AttachStart{OriginId: c.id}
	if c.clientID != "" {
		start.ClientId = &c.clientID
	}
	if c.key != "" {
		// Its answers are its principal's (approval.resolved.principal).
		start.OnBehalfOf = &c.key
	}
	return &trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Start{Start: start}}
}

func (a *approvals) enqueueLocked(m *trellisv1.AttachRequest) {
	a.queue = append(a.queue, m)
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run keeps the stream open for the facade's life, reopening it with a
// backoff after a failure.
func (a *approvals) run() {
	backoff := 100 * time.Millisecond
	for a.s.ctx.Err() == nil {
		opened, err := a.serve()
		if status.Code(err) == codes.Unimplemented {
			a.s.opts.Log.Debug("approvals are not served by this runtime")
			a.stop(true)
			return
		}
		if a.s.ctx.Err() != nil {
			break
		}
		if opened {
			backoff = 100 * time.Millisecond
		}
		a.s.opts.Log.Warn("approver stream ended; reopening", "err", err, "after", backoff)
		select {
		case <-time.After(backoff):
		case <-a.s.ctx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	a.stop(false)
}

// stop ends the stream's goroutine for good: the facade is closing, or
// (off) the runtime does not serve approvals.
func (a *approvals) stop(off bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running, a.off = false, off
	for id, ch := range a.waiting {
		close(ch)
		delete(a.waiting, id)
	}
	if off {
		clear(a.origins)
	}
}

// serve opens one stream, sends a start for every attached origin and
// routes what comes back until the stream fails. opened reports whether
// the stream got as far as a message from the runtime.
func (a *approvals) serve() (opened bool, err error) {
	ctx, cancel := context.WithCancel(a.s.ctx)
	defer cancel()
	stream, err := trellisv1.NewApprovalServiceClient(a.s.opts.Conn).Attach(ctx)
	if err != nil {
		return false, err
	}
	a.mu.Lock()
	a.gen++
	a.streams++
	gen := a.gen
	a.live, a.queue = true, nil
	a.wake = make(chan struct{}, 1) // a sender of an earlier stream cannot take this one's wake-ups
	wake := a.wake
	for id, c := range a.origins {
		if a.waiting[id] == nil {
			a.waiting[id] = make(chan struct{})
		}
		a.enqueueLocked(startMsg(c))
	}
	a.mu.Unlock()
	defer a.ended()

	go a.send(ctx, gen, wake, stream)
	for {
		resp, err := stream.Recv()
		if err != nil {
			return opened, err
		}
		opened = true
		a.route(ctx, gen, resp)
	}
}

// send writes the queued messages of stream gen in order until ctx ends
// or a write fails (the stream then fails for the reader too).
func (a *approvals) send(ctx context.Context, gen int, wake <-chan struct{}, stream attachStream) {
	for {
		a.mu.Lock()
		var batch []*trellisv1.AttachRequest
		if a.gen == gen && ctx.Err() == nil {
			batch, a.queue = a.queue, nil
		}
		a.mu.Unlock()
		for _, m := range batch {
			if err := stream.Send(m); err != nil {
				return
			}
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// ended forgets the state of a stream that failed: the runtime denied its
// pending requests, so the asks in flight are withdrawn.
func (a *approvals) ended() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live, a.queue = false, nil
	for id, st := range a.asks {
		st.cancel()
		delete(a.asks, id)
	}
}

// route handles one message of the stream.
func (a *approvals) route(ctx context.Context, gen int, resp *trellisv1.AttachResponse) {
	origin := resp.GetOriginId()
	switch {
	case resp.GetReady() != nil:
		if origin == "" {
			origin = resp.GetReady().GetOriginId()
		}
		a.mu.Lock()
		if ch := a.waiting[origin]; ch != nil {
			close(ch)
			delete(a.waiting, origin)
		}
		a.mu.Unlock()
	case resp.GetDetached() != nil:
		// The runtime ended the origin's approver: the connection attaches
		// again on its next session call.
		a.mu.Lock()
		delete(a.origins, origin)
		if ch := a.waiting[origin]; ch != nil {
			close(ch)
			delete(a.waiting, origin)
		}
		a.mu.Unlock()
	case resp.GetRequest() != nil:
		req := resp.GetRequest()
		a.ask(ctx, gen, origin, req.GetRequestId(), req.GetSessionId(), resp.GetAfterSeq(), func(ctx context.Context, c *wsConn) *trellisv1.AttachDecision {
			return c.ask(ctx, req)
		})
	case resp.GetQuestion() != nil:
		q := resp.GetQuestion()
		a.ask(ctx, gen, origin, q.GetQuestionId(), q.GetSessionId(), resp.GetAfterSeq(), func(ctx context.Context, c *wsConn) *trellisv1.AttachDecision {
			return c.askQuestion(ctx, q)
		})
	case resp.GetResolved() != nil:
		a.mu.Lock()
		if st, ok := a.asks[resp.GetResolved().GetRequestId()]; ok {
			st.cancel()
			delete(a.asks, resp.GetResolved().GetRequestId())
		}
		a.mu.Unlock()
	}
}

// ask puts a request (an approval request or a question, which put sends)
// to its origin's connection in a goroutine of its own, after the session's
// events up to afterSeq, and queues the answer for the stream it came on.
func (a *approvals) ask(ctx context.Context, gen int, origin, id, sessionID string, afterSeq int64, put func(context.Context, *wsConn) *trellisv1.AttachDecision) {
	a.mu.Lock()
	c := a.origins[origin]
	if c == nil {
		// The connection closed: its detach is queued, and the runtime
		// denies the request then.
		a.mu.Unlock()
		return
	}
	askCtx, cancel := context.WithCancel(c.rpc.Context())
	stop := context.AfterFunc(ctx, cancel)
	done := make(chan struct{})
	a.asks[id] = askState{origin: origin, cancel: cancel, done: done}
	a.mu.Unlock()
	go func() {
		defer close(done) // last: after the decision is queued
		defer stop()
		defer cancel()
		c.awaitEvents(askCtx, sessionID, afterSeq)
		decision := put(askCtx, c)
		a.mu.Lock()
		defer a.mu.Unlock()
		if st, ok := a.asks[id]; ok && st.origin == origin {
			delete(a.asks, id)
		}
		if askCtx.Err() != nil && decision.GetError() != "" {
			return // resolved elsewhere, the connection closed, or the stream ended
		}
		if a.live && a.gen == gen {
			a.enqueueLocked(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Decision{Decision: decision}})
		}
	}()
}
