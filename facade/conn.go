package facade

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/facade/methods"
	"github.com/trellis-run/trellis/facade/rest"
	"github.com/trellis-run/trellis/internal/broadcast"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/strict"
	"github.com/trellis-run/trellis/protocol/ws"
)

// Metadata the facade sends with each call of a connection (the runtime's
// rpc.MDOrigin and rpc.MDClientID).
const (
	mdOrigin   = "trellis-origin"
	mdClientID = "trellis-client-id"
)

// wsConn is one WebSocket client connection: its handshake state, its
// session subscriptions and its origin on the facade's approver stream, all
// tied to its life.
type wsConn struct {
	s   *Server
	rpc *jsonrpc.Conn
	log *slog.Logger

	authed    atomic.Bool
	helloDone func() // counts the connection out of the unauthenticated ones
	// approverHooked: the connection's close detaches its origin from the
	// facade's approver stream; approverWaited: a call waited for its
	// ready (both guarded by the approvals' mutex).
	approverHooked bool
	approverWaited bool

	// notes holds the watch notifications waiting for room in the write
	// queue (newNotes).
	notes    *broadcast.Queue[[]byte]
	id       string // connectionId, set by system.hello
	clientID string
	// key is the API key the connection said hello with ("" for the
	// daemon token): its calls run as the key's principal (checked by the
	// runtime on every call).
	key string
	// closeWithReason closes the WebSocket with status 1008 and a reason.
	closeWithReason func(reason string) error
	refusedOnce     sync.Once // the key was refused: the connection is closing

	mu   sync.Mutex
	subs map[string]*feed // sessions this connection receives session.event for

	// lender carries the calls of the tools this connection lent
	// (tool.register), from its first tool.register on.
	lender lender
}

func (c *wsConn) authenticated() bool { return c.authed.Load() }

func (c *wsConn) close(reason string) {
	if c.rpc != nil {
		c.rpc.Close()
	}
}

// serveWS upgrades the request and serves JSON-RPC on it until it closes.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	// Connections that have not proved the token are bounded in number
	// and in time, so idle sockets cannot pile up.
	if n := s.unauthed.Add(1); n > int64(s.opts.MaxUnauthenticated) {
		s.unauthed.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errcode.New(errcode.Overloaded,
			"%d WebSocket connections are waiting for system.hello already, the maximum; retry shortly", s.opts.MaxUnauthenticated).
			WithData("limit", "maxUnauthenticated").WithData("value", int64(s.opts.MaxUnauthenticated)).WithData("retryAfterMs", int64(1000)))
		return
	}
	release := sync.OnceFunc(func() { s.unauthed.Add(-1) })
	t, err := acceptWS(w, r, s.opts.AllowOrigins)
	if err != nil {
		release()
		s.opts.Log.Info("WebSocket refused", "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"), "err", err)
		return
	}
	remote := r.RemoteAddr
	c := &wsConn{s: s, log: s.opts.Log, subs: map[string]*feed{}, closeWithReason: t.CloseWithReason}
	deadline := time.AfterFunc(s.opts.HelloTimeout, func() {
		if !c.authed.Load() {
			c.log.Info("WebSocket closed: no system.hello in time", "remote", remote, "timeout", s.opts.HelloTimeout)
			t.CloseWithReason(fmt.Sprintf("system.hello must come within %s of connecting", s.opts.HelloTimeout))
		}
	})
	c.helloDone = func() {
		release()
		deadline.Stop()
	}
	c.rpc = jsonrpc.NewConn(t, jsonrpc.Gate("system.hello", c), jsonrpc.Options{Log: s.opts.Log, Errors: s.mapper, MaxInFlight: s.limits.MaxInFlight})
	c.notes = newNotes(c)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.rpc.OnClose(c.unwatchAll)
	// The handler returns and the connection is served by a goroutine of
	// its own: net/http's state of the upgrade request (its buffers, the
	// handler's grown stack) is not kept for the connection's life.
	go func() {
		defer func() {
			release()
			deadline.Stop()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
		if err := c.rpc.Serve(s.ctx); err != nil {
			c.log.Debug("WebSocket connection ended", "connectionId", c.id, "err", err)
		}
	}()
}

// outgoing adds the connection's identity to a runtime call.
func (c *wsConn) outgoing(ctx context.Context) context.Context {
	if c.id == "" {
		return ctx
	}
	kv := []string{mdOrigin, c.id}
	if c.clientID != "" {
		kv = append(kv, mdClientID, c.clientID)
	}
	if c.key != "" {
		kv = append(kv, rest.MDOnBehalfOf, c.key)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// Handle runs one client call: decode the params into the request message,
// call the runtime over gRPC, map errors in one table. A few session methods
// also manage the connection's subscriptions.
func (c *wsConn) Handle(ctx context.Context, rc *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
	ctx, span := startCall(ctx, method)
	result, err := c.handle(ctx, method, params)
	code := ""
	if err != nil {
		code = err.StringCode()
	}
	endCall(span, code)
	c.s.stats.observe(method, methods.Lookup(method) != nil, code)
	return result, err
}

// keyRefused closes a connection whose key the runtime stopped accepting
// (revoked, expired, its principal deleted) once the refusal is written:
// the connection can make no further call, so it does not stay open.
func (c *wsConn) keyRefused(why string) {
	c.refusedOnce.Do(func() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = c.rpc.Drain(ctx)
			reason := "unauthorized: " + why
			if len(reason) > 120 { // a close reason fits in 123 bytes
				reason = strings.ToValidUTF8(reason[:120], "")
			}
			c.log.Info("WebSocket closed: its API key is refused", "reason", why)
			_ = c.closeWithReason(reason)
		}()
	})
}

func (c *wsConn) handle(ctx context.Context, method string, params json.RawMessage) (any, *jsonrpc.Error) {
	failed := false // the runtime refused the call
	m := methods.Lookup(method)
	if m == nil {
		return nil, errcode.NewMethodNotFound(method)
	}
	var operationID string
	if m.Mutating {
		var err *jsonrpc.Error
		if params, operationID, err = takeOperationID(method, params); err != nil {
			return nil, err
		}
	}
	req := m.NewParams()
	if err := strict.Decode(method, params, req); err != nil {
		return nil, err
	}
	if method == "system.hello" && c.authed.Load() {
		return nil, errcode.NewInvalidParams("this connection already completed system.hello")
	}
	if method == "system.hello" {
		if max := c.s.limits.MaxConnections; c.s.authed.Load() >= int64(max) {
			return nil, overloaded("maxConnections", max, "the server holds its maximum of %d authenticated connections; retry later or use another daemon", max)
		}
	}
	if m.Watch != "" {
		// The call makes the connection the session's origin: its
		// approvals must reach it.
		c.ensureApprover()
		// Refuse before the call: the session must not be created or
		// started for a connection that then cannot watch it.
		if err := c.roomToWatch(sessionIDOf(req)); err != nil {
			return nil, err
		}
	}
	if m.Watch == methods.WatchBefore {
		// Subscribe before the turn starts, so no event of it is missed.
		if id := sessionIDOf(req); id != "" {
			c.mu.Lock()
			_, had := c.subs[id]
			c.mu.Unlock()
			if err := c.subscribe(ctx, id, -1); err != nil {
				return nil, err
			}
			if !had {
				// A call the runtime refuses (forbidden, or not_found for
				// a session the caller may not see) leaves no watch.
				defer func() {
					if failed {
						c.unwatch(id)
					}
				}()
			}
		}
	}
	if method == "tool.register" {
		// The runtime takes the tools only from an origin whose lending
		// stream is open: their calls come on it.
		if err := c.ensureLender(ctx); err != nil {
			return nil, err
		}
	}
	out := c.outgoing(ctx)
	if operationID != "" {
		out = metadata.AppendToOutgoingContext(out, rest.MDIdempotencyKey, operationID)
	}
	resp, err := m.Invoke(out, c.s.opts.Conn, req)
	if err != nil {
		failed = true
		// Unauthenticated is the runtime refusing the key itself (not
		// the unauthorized of an approval that is someone else's).
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unauthenticated && c.key != "" && c.authed.Load() {
			c.keyRefused(st.Message())
		}
		return nil, c.s.mapper.FromError(ctx, err)
	}
	switch r := resp.(type) {
	case *trellisv1.HelloResponse:
		c.s.fillLimits(r)
		c.opened(req.(*trellisv1.HelloRequest), r)
	case *trellisv1.CreateSessionResponse:
		if err := c.subscribe(ctx, r.GetSessionId(), 0); err != nil {
			return nil, err
		}
	case *trellisv1.CloseSessionResponse:
		c.unwatchClosed(sessionIDOf(req))
	case *trellisv1.DeleteSavedResponse:
		if r.GetDeleted() > 0 {
			if id := req.(*trellisv1.DeleteSavedRequest).GetSessionId(); id != "" {
				c.unwatch(id)
			} else {
				c.unwatchDeleted(ctx)
			}
		}
	case *trellisv1.PruneSessionsResponse:
		if !r.GetDryRun() {
			for _, p := range r.GetSessions() {
				if p.Held == nil {
					c.unwatch(p.GetSessionId())
				}
			}
		}
	case *trellisv1.ResumeSessionResponse:
		after := req.(*trellisv1.ResumeSessionRequest).GetAfterSeq()
		if seqs := r.GetEvents().GetSeqs(); len(seqs) > 0 {
			after = seqs[len(seqs)-1]
		}
		if !r.GetMore() {
			if err := c.subscribe(ctx, r.GetSessionId(), after); err != nil {
				return nil, err
			}
			break
		}
		// The rest follows the answer as session.event: the watch starts
		// once the answer is queued, from its last event (no gap, no
		// duplicate), so a long session resumes with bounded memory.
		id := r.GetSessionId()
		watch := func() {
			if err := c.subscribe(c.rpc.Context(), id, after); err != nil && c.rpc.Context().Err() == nil {
				c.log.Warn("session.resume: the events after the answer cannot follow", "sessionId", id, "afterSeq", after, "err", err)
			}
		}
		if !jsonrpc.AfterReply(ctx, func() { go watch() }) {
			watch()
		}
	}
	return resp, nil
}

// fillLimits puts the facade's own limits into a hello answer (the
// runtime knows only its own), over WebSocket and REST alike.
func (s *Server) fillLimits(r *trellisv1.HelloResponse) {
	if r.Limits == nil {
		r.Limits = &trellisv1.Limits{}
	}
	r.Limits.MaxInFlight = int32(s.limits.MaxInFlight)
	r.Limits.MaxConnections = int32(s.limits.MaxConnections)
	r.Limits.MaxWatchedSessions = int32(s.limits.MaxWatchedSessions)
	r.Limits.HelloTimeoutMs = s.opts.HelloTimeout.Milliseconds()
	r.Limits.MaxUnauthenticated = int32(s.opts.MaxUnauthenticated)
}

// overloaded is the error of a request past one of the facade's limits.
func overloaded(limit string, value int, format string, args ...any) *jsonrpc.Error {
	return errcode.New(errcode.Overloaded, format, args...).
		WithData("limit", limit).WithData("max", int64(value)).WithData("retryAfterMs", int64(1000))
}

func sessionIDOf(m proto.Message) string {
	if x, ok := m.(interface{ GetSessionId() string }); ok {
		return x.GetSessionId()
	}
	return ""
}

// opened records a successful hello. The connection owns no runtime stream:
// the facade's shared watch streams reach it, and its origin is added to
// the facade's one approver stream when it first acts on a session
// (ensureApprover).
func (c *wsConn) opened(req *trellisv1.HelloRequest, r *trellisv1.HelloResponse) {
	c.id = r.GetConnectionId()
	c.clientID = req.GetClientId()
	if subtle.ConstantTimeCompare([]byte(req.GetToken()), []byte(c.s.opts.Token)) != 1 {
		c.key = req.GetToken()
	}
	c.authed.Store(true)
	if c.helloDone != nil {
		c.helloDone()
	}
	c.s.authed.Add(1)
	c.rpc.OnClose(func() { c.s.authed.Add(-1) })
	c.log = c.log.With("connectionId", c.id)
	c.s.joinWatches(c)
}

// ensureApprover adds this connection's origin to the facade's approver
// stream before its first call that can make it an origin, so that the
// approvals of that session reach it; it waits (bounded) for the origin's
// ready. Its close detaches the origin.
func (c *wsConn) ensureApprover() {
	ready, first := c.s.approvals.add(c)
	if first {
		c.rpc.OnClose(func() { c.s.approvals.remove(c) })
	}
	if ready == nil {
		return
	}
	timer := time.NewTimer(c.s.approvals.readyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-timer.C:
		c.log.Warn("approver not ready in time; approvals go to the unattended queue meanwhile", "after", c.s.approvals.readyTimeout)
	}
	c.s.approvals.waited(c)
}

// subscribe forwards a session's events to this connection as session.event
// notifications, from afterSeq on (-1: from now), through the facade's
// shared feed of the session. It returns once the connection receives live
// events; a session already watched is left as it is. Past the
// connection's limit of watched sessions it answers overloaded.
func (c *wsConn) subscribe(ctx context.Context, sessionID string, afterSeq int64) *jsonrpc.Error {
	c.mu.Lock()
	if _, ok := c.subs[sessionID]; ok {
		c.mu.Unlock()
		return nil
	}
	if max := c.s.limits.MaxWatchedSessions; max > 0 && len(c.subs) >= max {
		c.mu.Unlock()
		return overloaded("maxWatchedSessions", max, "this connection already watches %d sessions; close some or use another connection", max)
	}
	f := c.s.hub.acquire(sessionID)
	c.subs[sessionID] = f
	c.mu.Unlock()
	if err := f.join(ctx, c, afterSeq); err != nil {
		c.unwatch(sessionID)
		var rerr *errcode.Error
		if errors.As(err, &rerr) {
			return rerr
		}
		return c.s.mapper.FromError(ctx, err)
	}
	return nil
}

// roomToWatch refuses with overloaded when the connection watches its
// maximum of sessions and sessionID is not one of them.
func (c *wsConn) roomToWatch(sessionID string) *jsonrpc.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[sessionID]; ok && sessionID != "" {
		return nil
	}
	if max := c.s.limits.MaxWatchedSessions; len(c.subs) >= max {
		return overloaded("maxWatchedSessions", max, "this connection already watches %d sessions, its maximum; use another connection", max)
	}
	return nil
}

// unwatch stops the session's events to this connection.
func (c *wsConn) unwatch(sessionID string) {
	c.mu.Lock()
	f := c.subs[sessionID]
	delete(c.subs, sessionID)
	c.mu.Unlock()
	if f != nil {
		f.leave(c)
		c.s.hub.release(f)
	}
}

// unwatchClosed ends the watch of a session this connection closed, so
// that a long-lived connection's watches are bounded by the sessions it
// uses, not by all it ever made. What the close stored (an interrupted
// turn's turn.done) still reaches the connection: it is read from the
// store up to the session's end, after what the connection has.
func (c *wsConn) unwatchClosed(sessionID string) {
	c.mu.Lock()
	f := c.subs[sessionID]
	delete(c.subs, sessionID)
	c.mu.Unlock()
	if f == nil {
		return
	}
	f.mu.Lock()
	have, live := f.watchers[c] // a nil map (an ended feed) has none
	f.leaveLocked(c)
	f.mu.Unlock()
	c.s.hub.release(f)
	if live {
		go c.drain(sessionID, have)
	}
}

// unwatchDeleted ends the watches of sessions a session.deleteSaved by
// workdir or all removed: those watched before the listing that it no
// longer shows (a session created meanwhile is not among them).
func (c *wsConn) unwatchDeleted(ctx context.Context) {
	c.mu.Lock()
	watched := make([]string, 0, len(c.subs))
	for id := range c.subs {
		watched = append(watched, id)
	}
	c.mu.Unlock()
	if len(watched) == 0 {
		return
	}
	all := true
	list, err := trellisv1.NewSessionServiceClient(c.s.opts.Conn).ListSessions(c.outgoing(ctx), &trellisv1.ListSessionsRequest{IncludeClosed: &all})
	if err != nil {
		c.log.Warn("session.deleteSaved: cannot list the sessions left; the deleted ones stay watched until the connection closes", "err", err)
		return
	}
	left := make(map[string]bool, len(list.GetSessions()))
	for _, s := range list.GetSessions() {
		left[s.GetSessionId()] = true
	}
	for _, id := range watched {
		if !left[id] {
			c.unwatch(id)
		}
	}
}

// drain sends the session's stored events after afterSeq to this
// connection, up to the end of the replay, and stops there.
func (c *wsConn) drain(sessionID string, afterSeq int64) {
	ctx, cancel := context.WithCancel(c.rpc.Context())
	defer cancel()
	err := c.follow(ctx, sessionID, afterSeq, func(_ int64, caughtUp bool) bool { return caughtUp })
	if err != nil && ctx.Err() == nil {
		c.log.Warn("session.close: the session's last events cannot follow", "sessionId", sessionID, "err", err)
	}
}

// unwatchAll ends every watch of a closed connection.
func (c *wsConn) unwatchAll() {
	c.mu.Lock()
	ids := make([]string, 0, len(c.subs))
	for id := range c.subs {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.unwatch(id)
	}
}

// eventsBeforeApproval bounds how long an approval request waits for the
// session's earlier events to reach its connection: they are normally
// there within milliseconds; a request is never held longer than this.
const eventsBeforeApproval = 2 * time.Second

// awaitEvents returns once the connection was given the events of the
// session up to seq, so that the approval.request sent next follows them
// on the wire (PROTOCOL.md's turn order: turn.started, message.user and the
// model's answer come before the ask). A session the connection does not
// watch is not waited for; nor is one whose events do not come within
// eventsBeforeApproval, or a request that ended meanwhile.
func (c *wsConn) awaitEvents(ctx context.Context, sessionID string, seq int64) {
	if seq <= 0 {
		return
	}
	c.mu.Lock()
	f := c.subs[sessionID]
	c.mu.Unlock()
	if f == nil {
		return
	}
	done := f.await(c, seq)
	if done == nil {
		return
	}
	timer := time.NewTimer(eventsBeforeApproval)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-ctx.Done():
	case <-timer.C:
		c.log.Warn("approval request sent before the session's earlier events reached the connection",
			"sessionId", sessionID, "afterSeq", seq, "waited", eventsBeforeApproval)
	}
	f.unwait(done)
}

// ask sends one approval.request to the client and turns its answer into a
// decision; an error reply or an invalid result denies.
func (c *wsConn) ask(ctx context.Context, req *trellisv1.ApprovalRequest) *trellisv1.AttachDecision {
	d := &trellisv1.AttachDecision{RequestId: req.GetRequestId()}
	reply := &trellisv1.ApprovalReply{}
	if why := c.request(ctx, "approval.request", req, reply); why != "" {
		d.Error = &why
		return d
	}
	d.Reply = reply
	return d
}

// askQuestion sends question.request to the connection and returns its
// answer as a decision for the approver stream (an error reply, or one that
// does not decode, as the decision's error: the question is declined).
func (c *wsConn) askQuestion(ctx context.Context, q *trellisv1.QuestionRequest) *trellisv1.AttachDecision {
	d := &trellisv1.AttachDecision{RequestId: q.GetQuestionId()}
	reply := &trellisv1.QuestionReply{}
	if why := c.request(ctx, "question.request", q, reply); why != "" {
		d.Error = &why
		return d
	}
	d.Answer = reply
	return d
}

// request sends a server → client request and decodes its result into
// reply; it returns why there is no answer ("" when there is one).
func (c *wsConn) request(ctx context.Context, method string, params, reply proto.Message) string {
	raw, err := c.rpc.Call(ctx, method, params)
	if err != nil {
		var rerr *errcode.Error
		if errors.As(err, &rerr) {
			return "the client answered with an error: " + rerr.Message
		}
		return err.Error()
	}
	if derr := strict.DecodeResult(method, raw, reply); derr != nil {
		return "the client's answer was invalid: " + derr.Message
	}
	return ""
}

func statusOf(err error) (codes.Code, bool) {
	if st, ok := status.FromError(err); ok {
		return st.Code(), true
	}
	return codes.Unknown, false
}

// acceptWS upgrades the request with the facade's WebSocket hygiene: the
// 32 MiB read limit, keepalive pings, and the origin policy.
func acceptWS(w http.ResponseWriter, r *http.Request, allowed []string) (*ws.Conn, error) {
	return ws.Accept(w, r, ws.Options{AllowedOrigins: allowed})
}

// takeOperationID takes the operationId param of a mutating method's
// params out of them: the rest is decoded as the method's request, the id
// travels as the call's idempotency-key metadata (docs/protocol.md,
// "Operation ids"). The runtime checks the id's form.
func takeOperationID(method string, params json.RawMessage) (json.RawMessage, string, *jsonrpc.Error) {
	if !bytes.Contains(params, []byte(`"operationId"`)) {
		return params, "", nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(params, &fields) != nil {
		// Not an object: the params decoder says what is wrong.
		return params, "", nil
	}
	raw, ok := fields["operationId"]
	if !ok {
		return params, "", nil
	}
	var id string
	if json.Unmarshal(raw, &id) != nil {
		return nil, "", errcode.NewInvalidParams(fmt.Sprintf("params of %s: operationId must be a string, got %s", method, strict.DescribeJSON(raw)))
	}
	delete(fields, "operationId")
	rest, err := json.Marshal(fields)
	if err != nil {
		return nil, "", errcode.NewInvalidParams(fmt.Sprintf("params of %s: %v", method, err))
	}
	return rest, id, nil
}
