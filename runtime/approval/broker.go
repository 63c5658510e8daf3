package approval

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/internal/broadcast"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/telemetry"
)

// DefaultTimeout is how long a request waits for an answer unless
// BrokerOptions say otherwise (PROTOCOL.md §5).
const DefaultTimeout = 300 * time.Second

// DefaultBacklog is how many undelivered events an approver or a queue
// watcher may have before the broker gives up on it.
const DefaultBacklog = 1024

// The decisions of an answer.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// ScopeOnce is the scope of an answer that adds no allowlist entry (the
// default). The wider scopes are the allowlist scopes ScopeSession,
// ScopeProject and ScopeAlways.
const ScopeOnce = "once"

// ScopeSite is protocol 1.x's answer scope for the whole daemon: it takes
// effect as ScopeAlways.
const ScopeSite = "site"

// Resolution.By values for requests that no person answered.
const (
	ByTimeout    = "timeout"    // the deadline passed
	ByInterrupt  = "interrupt"  // the turn was interrupted (its context ended)
	ByDisconnect = "disconnect" // the origin approver went away or stopped reading
	ByShutdown   = "shutdown"   // the broker closed
)

// Sentinel causes of the broker's errors; the errors themselves carry a
// protocol code (runtime/errs) and a message for people.
var (
	// ErrDenied: the call was not approved (approval_denied).
	ErrDenied = errors.New("approval denied")
	// ErrTimeout: nobody answered in time (approval_timeout).
	ErrTimeout = errors.New("approval timed out")
	// ErrNotPending: no such pending request (not_found).
	ErrNotPending = errors.New("approval request not pending")
	// ErrNotYours: an interactive request answered by someone other than
	// its origin (unauthorized).
	ErrNotYours = errors.New("approval request belongs to another origin")
	// ErrBadAnswer: a decision or scope outside the protocol's values
	// (invalid_params).
	ErrBadAnswer = errors.New("bad approval answer")
	// ErrClosed: the broker is closed.
	ErrClosed = errors.New("approval broker closed")
)

// Store is the part of the daemon's store the broker needs: allowlist
// patterns and the audit log.
type Store interface {
	store.AllowlistStore
	store.AuditStore
}

// BrokerOptions tune a Broker; the zero value gives the defaults.
type BrokerOptions struct {
	// Timeout is how long a request waits for an answer (0: DefaultTimeout).
	Timeout time.Duration
	// ScheduledTimeout applies to the sessions of scheduled jobs (0: Timeout).
	ScheduledTimeout time.Duration
	// Backlog bounds each approver's and watcher's undelivered events,
	// besides the one being handed over (0: DefaultBacklog).
	Backlog int
	// Now is the clock of CreatedAt and audit times (nil: time.Now).
	Now func() time.Time
	// Cluster, on a store several daemons share, keeps the pending
	// requests and the approvers' whereabouts there, so that a request
	// reaches its origin's approver on any daemon, every daemon's watchers
	// see it, and any daemon lists and answers it (broker_cluster.go).
	// Nil: this daemon alone. Run must then be running.
	Cluster store.ApprovalQueue
	// DaemonID is this daemon's id in the cluster (with Cluster).
	DaemonID string
	// Liveness is how long a daemon without a heartbeat still counts as
	// alive for approver routing (with Cluster; 0: 30 s). The daemon gives
	// its lease: a daemon that has not renewed for that long is dead.
	Liveness time.Duration
}

// Reply is a person's answer to a request.
type Reply struct {
	Decision string // DecisionAllow or DecisionDeny
	Scope    string // ScopeOnce ("" means once), ScopeSession, ScopeProject or ScopeAlways
	Reason   string
	// Answers answer a question (Request.Questions), one per question, in
	// order, with an allow; nil for an approval.
	Answers [][]string

	principalID, principalName string // who answered (Respond's ctx)
}

// Resolution says how a request ended: approval.resolved, plus what the
// audit log keeps.
type Resolution struct {
	RequestID string
	SessionID string
	Decision  string // DecisionAllow or DecisionDeny
	Scope     string // the scope that took effect; ScopeOnce for every denial
	// By is who decided: the answering origin (a connection or client id,
	// "grpc" for a gRPC caller without one) or ByTimeout, ByInterrupt,
	// ByDisconnect, ByShutdown.
	By string
	// PrincipalID and PrincipalName name the principal who answered ("":
	// nobody did, or a caller without one).
	PrincipalID   string `json:",omitempty"`
	PrincipalName string `json:",omitempty"`
	Reason        string
	At            time.Time
	// Question: the request was a question (allow: answered, deny:
	// declined or unanswered); Answers are its answers.
	Question bool       `json:",omitempty"`
	Answers  [][]string `json:",omitempty"`
}

// QueueEvent is one notification for queue watchers: exactly one of Pending
// (approval.pending: a request entered the unattended queue), Resolved
// (approval.resolved, sent for every request, interactive ones included) or
// Lagged (the watcher fell more than the backlog behind and was dropped:
// the channel closes right after; watch again and List to resync).
type QueueEvent struct {
	Pending  *Request
	Resolved *Resolution
	Lagged   bool
}

// ApproverEvent is one message for an origin approver: exactly one of
// Request (a question to answer) or Resolved (a request it was sent has
// ended, by its own answer or otherwise: dismiss the prompt).
type ApproverEvent struct {
	Request  *Request
	Resolved *Resolution
}

// Broker routes the questions of the agent's gate (Ask) to the session's
// origin approver or, with none attached, to the unattended queue, waits
// for the first answer, deadline or cancellation, broadcasts every
// resolution and records it in the audit log. It implements toolbox.Asker
// and session.Approvals. It is safe for concurrent use.
type Broker struct {
	allow         *Allowlist
	audit         store.AuditStore
	currentOrigin func(sessionID string) string
	log           *slog.Logger
	opts          BrokerOptions

	mu        sync.Mutex
	pending   map[string]*pending
	approvers map[string]*Approver // by origin
	watchers  broadcast.Hub[QueueEvent]
	recent    map[string]Resolution // recently resolved, for clearer not_found messages
	recentIDs []string              // recent's keys, oldest first
	closed    bool
	// remote holds the requests other daemons own that were delivered to
	// an approver attached here (Cluster only).
	remote map[string]*remoteRequest
	// records are the store writes of withdrawn requests; Close waits.
	records sync.WaitGroup
}

// pending is one request waiting for its outcome.
type pending struct {
	req      Request
	approver *Approver    // nil: the unattended queue
	done     chan outcome // capacity 1; receives exactly one outcome
	// recording: an answer or a timeout is being recorded in the store,
	// with b.mu released (resolveLocked); others leave p to it, but an
	// interrupt still withdraws p.
	recording bool
}

// outcome is a resolution and what Ask returns for it.
type outcome struct {
	res Resolution
	err error // nil for an allow
	// audited: its audit row is written already (an allow on a daemon
	// alone, recorded before it took effect).
	audited bool
}

// maxRecent bounds the memory of resolved request ids.
const maxRecent = 256

// storeTimeout bounds the audit and allowlist writes after a resolution.
const storeTimeout = 10 * time.Second

// NewBroker returns a broker that keeps allowlist entries and audit rows in
// st. currentOrigin returns a live session's current origin (it changes
// when a client re-binds or resumes); nil, or "" for a session, means the
// Question's own Origin. A nil log discards.
func NewBroker(st Store, currentOrigin func(sessionID string) string, log *slog.Logger, opts BrokerOptions) *Broker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ScheduledTimeout <= 0 {
		opts.ScheduledTimeout = opts.Timeout
	}
	if opts.Backlog <= 0 {
		opts.Backlog = DefaultBacklog
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Liveness <= 0 {
		opts.Liveness = 30 * time.Second
	}
	a := NewAllowlist(st, log)
	a.now = opts.Now
	return &Broker{
		allow:         a,
		audit:         st,
		currentOrigin: currentOrigin,
		log:           log,
		opts:          opts,
		pending:       map[string]*pending{},
		approvers:     map[string]*Approver{},
		recent:        map[string]Resolution{},
		remote:        map[string]*remoteRequest{},
		// A watcher's backlog and the one event being handed to it.
		watchers: broadcast.Hub[QueueEvent]{Limit: opts.Backlog + 1, Lagged: []QueueEvent{{Lagged: true}},
			OnDrop: func() { log.Warn("approval: dropping a queue watcher that fell behind", "backlog", opts.Backlog) }},
	}
}

// Ask puts q to a person and waits. The request goes to the approver
// attached for the session's current origin, or else to the unattended
// queue. It returns nil when the call is allowed; otherwise an error with
// code approval_denied (a denial, an interrupt: ctx ended, the approver
// going away or failing to answer, shutdown) or approval_timeout (nobody
// answered within the timeout). An allow with a scope wider than once adds
// the request's ScopeHint to the allowlist before Ask returns.
func (b *Broker) Ask(ctx context.Context, q Question) (err error) {
	ctx, span := telemetry.Start(ctx, "approval.wait", trace.WithAttributes(
		attribute.String("trellis.tool.name", q.Tool), attribute.String("trellis.session.id", q.SessionID)))
	var asked time.Time // set once the request waits
	defer func() { b.observe(span, asked, err) }()
	// The resolver takes session locks; call it before taking ours (the
	// session service calls OriginAttached while holding its own).
	if ctx.Err() != nil {
		return errs.Wrap(errcode.ApprovalDenied, ErrDenied, "the turn was interrupted before %s was approved", q.Tool)
	}
	req, timeout := b.newRequest(q, "ap")
	req.Risk = riskOf(q.Tool, q.Tag)
	req.ScopeHint = ScopeHint(q.Tool, q.Tag, q.Args, q.Workdir)
	o, asked, settle := b.put(ctx, q, req, timeout, span)
	if !settle {
		return o.err
	}
	return b.settle(ctx, req, o)
}

// newRequest is the request that asks q, its id prefixed prefix, and how
// long it waits for an answer.
func (b *Broker) newRequest(q Question, prefix string) (Request, time.Duration) {
	timeout := b.timeoutOf(q)
	now := b.opts.Now()
	return Request{
		RequestID:  ids.New(prefix),
		SessionID:  q.SessionID,
		TurnID:     q.TurnID,
		CallID:     q.CallID,
		Tool:       q.Tool,
		Args:       argsObject(q.Args),
		Tag:        q.Tag,
		TimeoutSec: int(math.Max(1, math.Ceil(timeout.Seconds()))),
		Workdir:    q.Workdir,
		JobID:      q.JobID,
		CreatedAt:  now,
		Deadline:   now.Add(timeout),
	}, timeout
}

// timeoutOf is how long q's request waits for an answer.
func (b *Broker) timeoutOf(q Question) time.Duration {
	if q.Kind == store.KindScheduled {
		return b.opts.ScheduledTimeout
	}
	return b.opts.Timeout
}

// put sends req (asked for q) to the approver attached for the session's
// current origin, or else to the unattended queue, and waits for its
// outcome: an answer, the timeout, or ctx ending. asked is when it began
// to wait (zero when it never did). settle is false when the outcome needs
// no settling: the request was never put (the broker is closed; o.err says
// why) or it was withdrawn when ctx ended (recorded already).
func (b *Broker) put(ctx context.Context, q Question, req Request, timeout time.Duration, span trace.Span) (o outcome, asked time.Time, settle bool) {
	origin := q.Origin
	if q.Queued {
		origin = ""
	} else if b.currentOrigin != nil {
		if o := b.currentOrigin(q.SessionID); o != "" {
			origin = o
		}
	}
	// On a shared store the origin's approver may be attached to another
	// daemon: the request is then interactive and travels through the store.
	elsewhere := b.approverElsewhere(ctx, origin)

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return outcome{err: errs.Wrap(errcode.ApprovalDenied, ErrClosed, "the daemon is shutting down, so %s was not approved", q.Tool)}, asked, false
	}
	var ap *Approver
	if origin != "" {
		ap = b.approvers[origin]
	}
	if ap != nil || elsewhere {
		req.Origin = origin
	}
	if req.Note == "" {
		req.Note = noteFor(q, req.Origin != "")
	}
	p := &pending{req: req, approver: ap, done: make(chan outcome, 1)}
	b.pending[req.RequestID] = p
	if b.opts.Cluster != nil {
		// In the store before anyone can see it, so that an answer on any
		// daemon finds it.
		b.mu.Unlock()
		err := b.share(ctx, req)
		b.mu.Lock()
		if err != nil {
			b.log.Error("approval: could not share the request with the cluster", "requestId", req.RequestID, "err", err)
			b.settleLocked(p, b.denied(p.req, ByShutdown, "the shared approval queue is unavailable",
				errs.Wrap(errcode.ApprovalDenied, err, "%s was not approved: the approval queue in the database is unavailable (%v)", q.Tool, err)))
		} else if p.approver != nil && b.approvers[p.approver.origin] != p.approver {
			p.approver = nil // it went away meanwhile: denied by its detach
		}
	}
	if b.pending[req.RequestID] == p {
		if p.approver != nil {
			b.sendLocked(p.approver, ApproverEvent{Request: p.reqCopy()})
		} else if req.Origin == "" {
			b.broadcastLocked(QueueEvent{Pending: p.reqCopy()})
		}
	}
	b.mu.Unlock()
	asked = time.Now()
	telemetry.ApprovalAsked()
	span.SetAttributes(attribute.String("trellis.approval.request_id", req.RequestID))
	b.log.InfoContext(ctx, "approval: asking", "requestId", req.RequestID, "sessionId", req.SessionID, "tool", req.Tool,
		"tag", req.Tag, "origin", req.Origin, "interactive", req.Interactive(), "question", req.IsQuestion(), "timeout", timeout)

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case o := <-p.done:
		return o, asked, true
	case <-timer.C:
		b.finish(p, b.denied(p.req, ByTimeout, "nobody answered within "+seconds(timeout),
			errs.Wrap(errcode.ApprovalTimeout, ErrTimeout, "nobody answered within %s, so %s was not approved", seconds(timeout), req.Tool)))
	case <-ctx.Done():
		o := b.denied(p.req, ByInterrupt, "the turn was interrupted",
			errs.Wrap(errcode.ApprovalDenied, ErrDenied, "the turn was interrupted before %s was approved", req.Tool))
		if b.withdraw(p, o) {
			// Withdrawn: settled already (its resolution is recorded).
			return o, asked, false
		}
	}
	// Whatever finished first (possibly an answer racing the timer) wins.
	return <-p.done, asked, true
}

// Respond answers the pending request requestID on behalf of by (the
// caller's origin id), as ctx's principal (the resolution names it). decision is allow or deny, scope once (also ""),
// session, project or always; anything else is invalid_params. An unknown
// or finished request is not_found; an interactive request answered by
// someone other than its origin is unauthorized. Requests in the unattended
// queue may be answered by anyone. The first answer wins.
func (b *Broker) Respond(ctx context.Context, by, requestID, decision, scope, reason string) error {
	r, err := checkReply(Reply{Decision: decision, Scope: scope, Reason: reason})
	if err != nil {
		return err
	}
	if p, ok := auth.PrincipalFrom(ctx); ok {
		r.principalID, r.principalName = p.ID, p.Name
	}
	return b.respond(by, requestID, false, func(req Request) (outcome, error) { return answered(req, by, r, b.opts.Now()), nil })
}

// respond resolves the pending request requestID with the outcome build
// makes of it, on behalf of by (see Respond); question says which kind of
// request the caller answers (the other kind is invalid_params).
func (b *Broker) respond(by, requestID string, question bool, build func(Request) (outcome, error)) error {
	b.mu.Lock()
	if _, mine := b.pending[requestID]; !mine && b.opts.Cluster != nil {
		b.mu.Unlock()
		return b.respondRemote(by, requestID, func(req Request) (outcome, error) {
			if err := answerable(req, question); err != nil {
				return outcome{}, err
			}
			return build(req)
		}, false)
	}
	defer b.mu.Unlock()
	p, err := b.lookupLocked(requestID)
	if err != nil {
		return err
	}
	if err := answerable(p.req, question); err != nil {
		return err
	}
	if p.req.Origin != "" && by != p.req.Origin {
		who := by
		if who == "" {
			who = "an anonymous caller"
		}
		return errs.Wrap(errcode.Unauthorized, ErrNotYours,
			"approval request %s is not %s's to answer: it was sent to the approver of session %s's origin, and only that connection may answer it",
			requestID, who, p.req.SessionID)
	}
	o, err := build(p.req)
	if err != nil {
		return err
	}
	b.resolveLocked(p, o)
	return nil
}

// List returns the unattended queue plus the interactive requests sent to
// caller, oldest first; sessionID ("" = all) narrows it to one session.
func (b *Broker) List(caller, sessionID string) []Request {
	return b.list(sessionID, func(origin string) bool { return origin == "" || caller != "" && origin == caller })
}

// ListAll returns every undecided request of sessionID ("" = all), the
// ones put to a session's origin approver (Origin set) included: an
// operator's view of what waits (approval.list includeInteractive). Only
// their origin answers those.
func (b *Broker) ListAll(sessionID string) []Request {
	return b.list(sessionID, func(string) bool { return true })
}

// list returns the undecided requests of sessionID ("" = all) whose origin
// keep accepts, oldest first: the cluster's shared set when there is one.
func (b *Broker) list(sessionID string, keep func(origin string) bool) []Request {
	if b.opts.Cluster != nil {
		if out, err := b.listShared(sessionID, keep); err == nil {
			return out
		} else {
			b.log.Warn("approval: list the shared queue; listing this daemon's requests only", "err", err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Request
	for _, p := range b.pending {
		if sessionID != "" && p.req.SessionID != sessionID {
			continue
		}
		if keep(p.req.Origin) {
			out = append(out, p.req)
		}
	}
	slices.SortFunc(out, func(x, y Request) int {
		return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), cmp.Compare(x.RequestID, y.RequestID))
	})
	return out
}

// Pending counts the undecided requests of a session.
func (b *Broker) Pending(sessionID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, p := range b.pending {
		if p.req.SessionID == sessionID {
			n++
		}
	}
	return n
}

// OriginAttached reports whether an approver is attached for origin.
func (b *Broker) OriginAttached(origin string) bool {
	b.mu.Lock()
	here := origin != "" && b.approvers[origin] != nil
	b.mu.Unlock()
	return here || b.approverElsewhere(context.Background(), origin)
}

// Approvers counts the attached approvers.
func (b *Broker) Approvers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.approvers)
}

// Watch returns the queue notifications from now on: Pending for each
// request entering the unattended queue and Resolved for every resolution.
// It does not replay: watch first, then List, and dedupe by request id.
// Delivery never slows Ask: each watcher has a queue of up to the backlog
// undelivered events (besides the one being handed over); a watcher that
// falls further behind is sent what it was queued, then Lagged, and
// dropped. The channel closes when ctx ends, after Lagged, or when the
// broker closes (after the shutdown resolutions).
func (b *Broker) Watch(ctx context.Context) <-chan QueueEvent {
	return b.watchers.Add(ctx).Events()
}

// Attach makes the returned Approver the one that receives the requests of
// the sessions whose current origin is origin. A second Attach for the same
// origin replaces the first: the old approver's channel closes and its
// pending requests are sent to the new one. An empty origin is
// invalid_params.
func (b *Broker) Attach(origin string) (*Approver, error) {
	if origin == "" {
		return nil, errs.New(errcode.InvalidParams, "an approver needs an origin id")
	}
	// The backlog and the one event being handed over; past it the broker
	// detaches the approver (sendLocked).
	ap := &Approver{b: b, origin: origin, box: broadcast.New(broadcast.Policy[ApproverEvent]{
		Limit: b.opts.Backlog + 1, Overflow: broadcast.RefuseValue})}
	if err := b.attach(ap); err != nil {
		return nil, err
	}
	return ap, nil
}

// attach makes ap the approver of its origin (see Attach).
func (b *Broker) attach(ap *Approver) error {
	origin := ap.origin
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errs.Wrap(errcode.ToolInactive, ErrClosed, "approvals are unavailable: the daemon is shutting down")
	}
	old := b.approvers[origin]
	b.approvers[origin] = ap
	if old != nil {
		old.finish()
		for _, p := range b.pendingOfLocked(old) {
			p.approver = ap
			b.sendLocked(ap, ApproverEvent{Request: p.reqCopy()})
		}
	}
	b.mu.Unlock()
	b.log.Info("approval: approver attached", "origin", origin, "replaced", old != nil)
	b.attachShared(ap)
	return nil
}

// Close denies every pending request (by ByShutdown), closes every approver
// and watcher channel (after delivering the shutdown resolutions), and
// makes later calls to Ask deny at once, then waits for the store writes
// of withdrawn requests. It is idempotent.
func (b *Broker) Close() {
	defer b.records.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, p := range b.pendingOfLocked(nil) {
		b.finishLocked(p, b.denied(p.req, ByShutdown, "the daemon is shutting down",
			errs.Wrap(errcode.ApprovalDenied, ErrClosed, "the daemon is shutting down, so %s was not approved", p.req.Tool)))
	}
	for origin, ap := range b.approvers {
		ap.finish()
		delete(b.approvers, origin)
	}
	b.watchers.Close()
}

// Approver is an origin's approval stream: requests to answer and
// resolutions to dismiss arrive on Events; answers go back with Answer or
// Fail. Detach ends it.
type Approver struct {
	b      *Broker
	origin string
	box    *broadcast.Queue[ApproverEvent] // nil for an approver of a group
	group  *groupSink                      // set for an approver of a group
}

// push queues ev for the approver's consumer; full when its backlog is.
func (a *Approver) push(ev ApproverEvent) (full bool) {
	if a.group != nil {
		return a.group.push(a, ev)
	}
	return a.box.Push(ev)
}

// finish ends the approver's events after what is queued.
func (a *Approver) finish() {
	if a.group != nil {
		a.group.end(a)
		return
	}
	a.box.End(nil)
}

// stop ends the approver's events now.
func (a *Approver) stop() {
	if a.group != nil {
		a.group.end(a)
		return
	}
	a.box.Stop(nil)
}

// Origin returns the origin the approver answers for.
func (a *Approver) Origin() string { return a.origin }

// Events returns the approver's messages in order. The channel closes on
// Detach, when another approver attaches for the same origin, when the
// approver falls more than the backlog behind (it is then detached), and
// when the broker closes. An approver of a group has none: its messages
// come on the group's channel.
func (a *Approver) Events() <-chan ApproverEvent {
	if a.box == nil {
		return nil
	}
	return a.box.Events()
}

// Answer answers a request, as Broker.Respond does with the approver's
// origin as the caller and ctx's principal (the approver stream's) as who.
//
// A client's reply to approval.request is read leniently: a scope this
// daemon does not know never changes the decision (an allow stays an allow,
// taking effect once, and the resolution's reason says why).
func (a *Approver) Answer(ctx context.Context, requestID string, r Reply) error {
	r = tolerateScope(r)
	return a.b.Respond(ctx, a.origin, requestID, r.Decision, r.Scope, r.Reason)
}

// tolerateScope replaces a scope outside the protocol's values with once,
// noting it in the reason.
func tolerateScope(r Reply) Reply {
	switch r.Scope {
	case "", ScopeOnce, ScopeSession, ScopeProject, ScopeAlways, ScopeSite:
		return r
	}
	note := fmt.Sprintf("the answer's scope %q is unknown, so it took effect once", r.Scope)
	if r.Reason != "" {
		note = r.Reason + " (" + note + ")"
	}
	r.Scope, r.Reason = ScopeOnce, note
	return r
}

// Fail reports that the approver could not answer a request it was sent
// (an error reply): the request is denied with cause as the reason.
func (a *Approver) Fail(requestID, cause string) error {
	b := a.b
	b.mu.Lock()
	if _, mine := b.pending[requestID]; !mine && b.opts.Cluster != nil {
		b.mu.Unlock()
		return b.respondRemote(a.origin, requestID, func(req Request) (outcome, error) {
			return b.denied(req, a.origin, "the approver could not answer: "+cause, nil), nil
		}, true)
	}
	defer b.mu.Unlock()
	p, err := b.lookupLocked(requestID)
	if err != nil {
		return err
	}
	if p.req.Origin != a.origin {
		return errs.Wrap(errcode.Unauthorized, ErrNotYours,
			"approval request %s was not sent to the approver of %s", requestID, a.origin)
	}
	b.resolveLocked(p, b.denied(p.req, a.origin, "the approver could not answer: "+cause,
		errs.Wrap(errcode.ApprovalDenied, ErrDenied, "the approver could not answer, so %s was denied: %s", p.req.Tool, cause)))
	return nil
}

// Detach ends the approver: its channel closes and the interactive requests
// waiting on it are denied ("the approving connection went away"). It is
// idempotent, and harmless after the approver was replaced.
func (a *Approver) Detach() {
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.approvers[a.origin] == a {
		b.detachLocked(a)
		b.log.Info("approval: approver detached", "origin", a.origin)
		return
	}
	a.stop()
}

// detachLocked removes ap and denies the requests waiting on it.
func (b *Broker) detachLocked(ap *Approver) {
	if b.approvers[ap.origin] == ap {
		delete(b.approvers, ap.origin)
	}
	ap.stop()
	for _, p := range b.pendingOfLocked(ap) {
		b.finishLocked(p, b.denied(p.req, ByDisconnect, "the approving connection went away",
			errs.Wrap(errcode.ApprovalDenied, ErrDenied, "the approving connection went away before %s was approved", p.req.Tool)))
	}
	b.detachSharedLocked(ap)
}

// sendLocked queues ev for ap; an approver that stopped reading is detached.
func (b *Broker) sendLocked(ap *Approver, ev ApproverEvent) {
	if ap.push(ev) {
		b.log.Warn("approval: detaching an approver that stopped reading", "origin", ap.origin, "backlog", b.opts.Backlog)
		b.detachLocked(ap)
	}
}

// broadcastLocked queues ev for every watcher; laggards are sent what
// they were queued, then Lagged, and dropped.
func (b *Broker) broadcastLocked(ev QueueEvent) { b.watchers.Publish(ev) }

// withdraw ends p with o, the deny of an interrupted turn, at once, and
// records it in the store (the shared queue's row, the audit row) in the
// background: a deny needs nobody's agreement, and the turn must not wait
// for a store that may not answer — a daemon past its lease, cut off from
// the database, cancels its turns and tells its clients once they have
// wound down. It reports false when p was resolved already.
func (b *Broker) withdraw(p *pending, o outcome) bool {
	b.mu.Lock()
	if !b.settleLocked(p, o) {
		b.mu.Unlock()
		return false
	}
	b.records.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.records.Done()
		if b.opts.Cluster != nil {
			b.resolveShared(p.req, o) // a deny stands, whatever the queue holds
		}
		_ = b.settle(context.Background(), p.req, o)
	}()
	return true
}

func (b *Broker) finish(p *pending, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resolveLocked(p, o)
}

// resolveLocked is finishLocked for the callers that may release b.mu
// (an answer, an approver's error, a timeout): the store write happens
// without it, so that a store that does not answer (a daemon cut off from
// its database) holds up neither the other requests nor the interrupt of
// p's own turn, which withdraws p meanwhile. p is settled with what was
// recorded unless it was settled meanwhile. b.mu is held on entry and on
// return.
func (b *Broker) resolveLocked(p *pending, o outcome) {
	if b.pending[p.req.RequestID] != p || p.recording {
		return
	}
	p.recording = true
	b.mu.Unlock()
	o = b.record(p.req, o)
	b.mu.Lock()
	p.recording = false
	b.settleLocked(p, o)
}

// finishLocked resolves p with o unless it is already resolved: the first
// resolution wins (on a shared store, the first recorded there, which may
// be another daemon's). It broadcasts the resolution and wakes Ask.
//
// An allow takes effect only once the store has recorded it (the shared
// queue's row; on a daemon alone, its audit row): a daemon whose store
// refused the write, or that lost its link to the database, cannot tell
// whether another daemon took the session over and denied the request, so
// the allow becomes a deny.
func (b *Broker) finishLocked(p *pending, o outcome) bool {
	if b.pending[p.req.RequestID] != p {
		return false
	}
	return b.settleLocked(p, b.record(p.req, o))
}

// record writes o in the store before it takes effect, and returns what
// takes effect: on a shared store, the first resolution recorded there;
// on a daemon alone, o, or a deny for an allow the store did not take.
func (b *Broker) record(req Request, o outcome) outcome {
	if b.opts.Cluster != nil {
		return b.resolveShared(req, o)
	}
	if o.err == nil {
		return b.recordAllow(req, o)
	}
	return o
}

// recordAllow writes the audit row of an allow on a daemon alone, before
// the allow takes effect; if the store cannot take it, the outcome is a deny.
func (b *Broker) recordAllow(req Request, o outcome) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := b.appendAudit(ctx, req, o.res); err != nil {
		b.log.Error("approval: could not record an allow in the audit log; denying the call", "requestId", req.RequestID, "err", err)
		return unrecordedAllow(req, o)
	}
	o.audited = true
	return o
}

// unrecordedAllow is the deny an allow becomes when the store did not
// record it.
func unrecordedAllow(req Request, o outcome) outcome {
	res := o.res
	res.Decision, res.Scope = DecisionDeny, ScopeOnce
	res.Reason = joinReason(res.Reason, "the allow could not be recorded in the store, so it did not take effect")
	return outcome{res: res, err: errs.Wrap(errcode.ApprovalDenied, ErrDenied,
		"%s was allowed by %s, but the store could not record the answer, so the call was not run; check the store (disk space, database link), then try again",
		req.Tool, res.By)}
}

func (b *Broker) appendAudit(ctx context.Context, req Request, res Resolution) error {
	_, err := b.audit.AppendAudit(ctx, store.AuditEntry{
		RequestID: req.RequestID, SessionID: req.SessionID, Tool: req.Tool, Args: req.Args,
		Decision: res.Decision, Scope: res.Scope, By: res.By, Reason: res.Reason, At: res.At.UTC(),
	})
	return err
}

// settleLocked is finishLocked without the shared store: for a resolution
// already recorded there.
func (b *Broker) settleLocked(p *pending, o outcome) bool {
	if b.pending[p.req.RequestID] != p {
		return false
	}
	delete(b.pending, p.req.RequestID)
	res := o.res
	b.rememberLocked(res)
	b.broadcastLocked(QueueEvent{Resolved: &res})
	if ap := p.approver; ap != nil && b.approvers[ap.origin] == ap {
		b.sendLocked(ap, ApproverEvent{Resolved: &res})
	}
	p.done <- o
	return true
}

// lookupLocked returns the pending request id or a not_found error that
// says, when it knows, how the request ended.
func (b *Broker) lookupLocked(id string) (*pending, error) {
	if p, ok := b.pending[id]; ok && p.recording {
		return nil, errs.Wrap(errcode.NotFound, ErrNotPending,
			"approval request %s was answered (or timed out) a moment ago; the answer is being recorded", id)
	} else if ok {
		return p, nil
	}
	if r, ok := b.recent[id]; ok {
		return nil, errs.Wrap(errcode.NotFound, ErrNotPending,
			"approval request %s is already resolved (%s by %s)", id, r.Decision, r.By)
	}
	return nil, errs.Wrap(errcode.NotFound, ErrNotPending,
		"no pending approval request %q: it is unknown or already answered, timed out or cancelled", id)
}

func (b *Broker) rememberLocked(res Resolution) {
	if len(b.recentIDs) >= maxRecent {
		delete(b.recent, b.recentIDs[0])
		b.recentIDs = b.recentIDs[1:]
	}
	b.recent[res.RequestID] = res
	b.recentIDs = append(b.recentIDs, res.RequestID)
}

// pendingOfLocked returns the requests waiting on ap (nil: every request),
// oldest first.
func (b *Broker) pendingOfLocked(ap *Approver) []*pending {
	var out []*pending
	for _, p := range b.pending {
		if ap == nil || p.approver == ap {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(x, y *pending) int {
		return cmp.Or(x.req.CreatedAt.Compare(y.req.CreatedAt), cmp.Compare(x.req.RequestID, y.req.RequestID))
	})
	return out
}

// settle does the durable part of a resolution (allowlist entry, audit row
// unless written already) and returns what Ask returns. Store failures are
// logged: the decision stands either way (an allow was recorded before it
// took effect, see finishLocked).
func (b *Broker) settle(ctx context.Context, req Request, o outcome) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	res := o.res
	if res.Decision == DecisionAllow && res.Scope != ScopeOnce {
		id, err := b.allow.Add(sctx, req.ScopeHint, res.Scope, req.Workdir, req.SessionID,
			auth.Principal{ID: res.PrincipalID, Name: res.PrincipalName})
		if err != nil {
			b.log.Error("approval: could not add the allowlist entry of an answer", "requestId", req.RequestID,
				"pattern", req.ScopeHint, "scope", res.Scope, "err", err)
		} else {
			b.log.Info("approval: allowlisted by answer", "requestId", req.RequestID, "patternId", id,
				"pattern", req.ScopeHint, "scope", res.Scope)
		}
	}
	if !o.audited {
		if err := b.appendAudit(sctx, req, res); err != nil {
			b.log.Error("approval: could not append to the audit log", "requestId", req.RequestID, "err", err)
		}
	}
	b.log.Info("approval: resolved", "requestId", req.RequestID, "sessionId", req.SessionID, "tool", req.Tool,
		"decision", res.Decision, "scope", res.Scope, "by", res.By, "reason", res.Reason)
	return o.err
}

func (p *pending) reqCopy() *Request {
	r := p.req
	return &r
}

// checkReply validates an answer and fills the default scope.
func checkReply(r Reply) (Reply, error) {
	switch r.Decision {
	case DecisionAllow, DecisionDeny:
	default:
		return r, errs.Wrap(errcode.InvalidParams, ErrBadAnswer, "decision must be allow or deny (got %q)", r.Decision)
	}
	switch r.Scope {
	case "":
		r.Scope = ScopeOnce
	case ScopeSite:
		r.Scope = ScopeAlways
	case ScopeOnce, ScopeSession, ScopeProject, ScopeAlways:
	default:
		return r, errs.Wrap(errcode.InvalidParams, ErrBadAnswer,
			"scope must be once, session, project, always or site (got %q)", r.Scope)
	}
	return r, nil
}

// answered is the outcome of a person's (checked) answer. A wider scope
// that cannot take effect is recorded as once, with the reason saying why.
func answered(req Request, by string, r Reply, at time.Time) outcome {
	res := Resolution{RequestID: req.RequestID, SessionID: req.SessionID, Decision: r.Decision,
		Scope: ScopeOnce, By: by, PrincipalID: r.principalID, PrincipalName: r.principalName, Reason: r.Reason, At: at,
		Question: req.IsQuestion()}
	if req.IsQuestion() {
		return answeredQuestion(res, r)
	}
	if r.Decision == DecisionDeny {
		who := by
		if r.principalName != "" {
			who = r.principalName
		}
		msg := req.Tool + " was denied by " + who
		if r.Reason != "" {
			msg += ": " + r.Reason
		}
		return outcome{res: res, err: errs.Wrap(errcode.ApprovalDenied, ErrDenied, "%s", msg)}
	}
	res.Scope = r.Scope
	why := ""
	switch {
	case r.Scope == ScopeOnce:
	case req.ScopeHint == "":
		why = "no allowlist pattern can cover this call"
	case r.Scope == ScopeProject && req.Workdir == "":
		why = "the session has no workdir"
	}
	if why != "" {
		res.Scope = ScopeOnce
		res.Reason = joinReason(r.Reason, "scope "+r.Scope+" taken as once: "+why)
	}
	return outcome{res: res}
}

// denied is the outcome of a denial nobody typed (timeout, interrupt, ...).
func (b *Broker) denied(req Request, by, reason string, err error) outcome {
	return outcome{
		res: Resolution{RequestID: req.RequestID, SessionID: req.SessionID, Decision: DecisionDeny,
			Scope: ScopeOnce, By: by, Reason: reason, At: b.opts.Now(), Question: req.IsQuestion()},
		err: err,
	}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + " (" + b + ")"
}

func seconds(d time.Duration) string {
	if d < time.Second {
		return d.String()
	}
	return strconv.Itoa(int(math.Ceil(d.Seconds()))) + "s"
}

// observe ends Ask's span and, when the request waited (asked is set),
// records how long and how it ended.
func (b *Broker) observe(span trace.Span, asked time.Time, err error) {
	outcome := "allowed"
	switch {
	case err == nil:
	case errs.CodeOf(err) == errcode.ApprovalTimeout:
		outcome = "timeout"
	default:
		outcome = "denied"
	}
	if !asked.IsZero() {
		telemetry.ApprovalSettled(outcome, time.Since(asked))
	}
	span.SetAttributes(attribute.String("trellis.approval.outcome", outcome))
	span.End()
}
