package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// GRPCCaller is the identity of a gRPC caller that sends no trellis-origin
// metadata. It is nobody's origin, so it can answer unattended requests only.
const GRPCCaller = "grpc"

// maxClientOrigins bounds the origins remembered per client id for
// re-binding.
const maxClientOrigins = 16

// ApprovalServer implements trellisv1.ApprovalServiceServer over the
// approval broker and the allowlist.
type ApprovalServer struct {
	trellisv1.UnsafeApprovalServiceServer
	broker *approval.Broker
	allow  *approval.Allowlist

	mine    CallerSessions
	access  SessionAccess // nil: no per-session checks
	keys    *auth.Authenticator
	log     *slog.Logger
	lastSeq func(ctx context.Context, sessionID string) (int64, error)
	mu      sync.Mutex
	rebind  func(oldOrigins []string, newOrigin string) int
	clients map[string][]string // client id → its recent origins, oldest first
}

// ApprovalServerOptions are what the approval service takes from the
// session service.
type ApprovalServerOptions struct {
	// Rebind is the session re-binding that an Attach carrying a clientId
	// triggers (session.Service.Rebind): the live sessions whose origin was
	// an earlier, now detached origin of the same client move to the new
	// one, so that their approvals reach it. Without it clientId is ignored.
	Rebind func(oldOrigins []string, newOrigin string) int
	// CallerSessions lets permission.allowlist.add infer an omitted subject
	// from the caller's session.
	CallerSessions CallerSessions
	// Access, when set, keeps principals below operator to the approvals
	// of sessions they own or were granted: approval.list leaves the
	// others out, approval.respond answers them not_found (or forbidden
	// for a viewer grant), as session methods do.
	Access SessionAccess
	// Log receives the store failures of those checks.
	Log *slog.Logger
	// Keys authenticates the keys of AttachStart.on_behalf_of (nil: they
	// are ignored).
	Keys *auth.Authenticator
	// LastSeq gives a request's AttachResponse.after_seq: the seq of its
	// session's last stored event (eventlog.Log.LastSeq). Nil: 0.
	LastSeq func(ctx context.Context, sessionID string) (int64, error)
}

// NewApprovalServer returns the approval service.
func NewApprovalServer(b *approval.Broker, a *approval.Allowlist, o ApprovalServerOptions) *ApprovalServer {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ApprovalServer{broker: b, allow: a, clients: map[string][]string{}, rebind: o.Rebind, mine: o.CallerSessions, access: o.Access, keys: o.Keys, lastSeq: o.LastSeq, log: log}
}

// Attached counts the approvers attached now (for the daemon's counters).
func (s *ApprovalServer) Attached() int { return s.broker.Approvers() }

// approvalCaller is who answers: the trellis-origin metadata, else GRPCCaller.
func approvalCaller(ctx context.Context) string {
	if o := originOf(ctx); o != "" {
		return o
	}
	return GRPCCaller
}

// ListApprovals lists the unattended queue plus the caller's own
// interactive requests.
func (s *ApprovalServer) ListApprovals(ctx context.Context, req *trellisv1.ListApprovalsRequest) (*trellisv1.ListApprovalsResponse, error) {
	if id := req.GetSessionId(); id != "" && s.access != nil {
		// An unknown session is not_found, as for every session method,
		// not an empty list (snowpea 1.7 answers so).
		// One the caller may not see answers the same (no existence leak).
		if _, err := s.access.GetSession(ctx, id); errors.Is(err, store.ErrNotFound) {
			return nil, errs.New(errcode.NotFound, "session %s not found", id)
		} else if err != nil {
			return nil, err
		}
		if err := s.hidden(ctx, "/trellis.v1.ApprovalService/ListApprovals", store.RoleViewer, id); err != nil {
			return nil, err
		}
	}
	var reqs []approval.Request
	if req.GetIncludeInteractive() {
		reqs = s.broker.ListAll(req.GetSessionId())
	} else {
		reqs = s.broker.List(approvalCaller(ctx), req.GetSessionId())
	}
	out := &trellisv1.ListApprovalsResponse{Requests: make([]*trellisv1.ApprovalRequest, 0, len(reqs))}
	for _, r := range reqs {
		if r.IsQuestion() || s.hidden(ctx, "/trellis.v1.ApprovalService/ListApprovals", store.RoleViewer, r.SessionID) != nil {
			continue
		}
		m := approvalRequestToProto(r)
		if req.GetIncludeInteractive() {
			m.Interactive = new(r.Interactive())
		}
		out.Requests = append(out.Requests, m)
	}
	return out, nil
}

// ListQuestions lists the agent's questions waiting for an answer: the
// unattended queue's plus those put to the caller's own connection.
func (s *ApprovalServer) ListQuestions(ctx context.Context, req *trellisv1.ListQuestionsRequest) (*trellisv1.ListQuestionsResponse, error) {
	if id := req.GetSessionId(); id != "" && s.access != nil {
		if _, err := s.access.GetSession(ctx, id); errors.Is(err, store.ErrNotFound) {
			return nil, errs.New(errcode.NotFound, "session %s not found", id)
		} else if err != nil {
			return nil, err
		}
		if err := s.hidden(ctx, "/trellis.v1.ApprovalService/ListQuestions", store.RoleViewer, id); err != nil {
			return nil, err
		}
	}
	out := &trellisv1.ListQuestionsResponse{Questions: []*trellisv1.QuestionRequest{}}
	for _, r := range s.broker.List(approvalCaller(ctx), req.GetSessionId()) {
		if !r.IsQuestion() || s.hidden(ctx, "/trellis.v1.ApprovalService/ListQuestions", store.RoleViewer, r.SessionID) != nil {
			continue
		}
		m := questionToProto(r)
		m.Interactive = new(r.Interactive())
		out.Questions = append(out.Questions, m)
	}
	return out, nil
}

// RespondQuestion answers or declines a pending question; the first answer
// wins.
func (s *ApprovalServer) RespondQuestion(ctx context.Context, req *trellisv1.RespondQuestionRequest) (*trellisv1.RespondQuestionResponse, error) {
	if req.GetQuestionId() == "" {
		return nil, errs.New(errcode.InvalidParams, "questionId is required")
	}
	for _, r := range s.broker.List(approvalCaller(ctx), "") {
		if r.RequestID == req.GetQuestionId() {
			if err := s.hidden(ctx, "/trellis.v1.ApprovalService/RespondQuestion", store.RoleApprover, r.SessionID); err != nil {
				return nil, err
			}
			break
		}
	}
	if req.GetDeclined() && len(req.GetAnswers()) > 0 {
		return nil, errs.New(errcode.InvalidParams, "a declined question takes no answers: send answers, or declined")
	}
	err := s.broker.RespondQuestion(ctx, approvalCaller(ctx), req.GetQuestionId(), answersOf(req.GetAnswers()), req.GetDeclined(), req.GetReason())
	if err != nil {
		return nil, err
	}
	return &trellisv1.RespondQuestionResponse{Ok: true}, nil
}

// answersOf is the broker's form of a question's answers.
func answersOf(as []*trellisv1.QuestionAnswer) [][]string {
	out := make([][]string, len(as))
	for i, a := range as {
		out[i] = a.GetValues()
	}
	return out
}

// hidden says whether the caller may not act (least role minRole) on the
// approvals of sessionID; nil = it may.
func (s *ApprovalServer) hidden(ctx context.Context, fullMethod, minRole, sessionID string) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || s.access == nil {
		return nil
	}
	return sessionAllowed(ctx, s.access, s.log, p, fullMethod, minRole, sessionID)
}

// mayRaise says whether the caller may allow a budget request: an allow
// sets a budget, so it needs what setting that budget needs
// (session.setBudget's member role and access to the session, or
// principal.setBudget's admin role for a principal's budget).
func (s *ApprovalServer) mayRaise(ctx context.Context, r approval.Request) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return nil
	}
	var args struct {
		Budget struct {
			Source string `json:"source"`
		} `json:"budget"`
	}
	_ = json.Unmarshal(r.Args, &args)
	method, minRole := "/trellis.v1.SessionService/SetBudget", store.RoleMember
	if args.Budget.Source == "principal" {
		method, minRole = "/trellis.v1.PrincipalService/SetPrincipalBudget", store.RoleAdmin
	}
	if !auth.Allows(p.Role, minRole) {
		return errs.New(errcode.Forbidden, "allowing budget request %s raises the %s budget of session %s, which needs the %s role (yours is %s): deny it, or ask someone who has it",
			r.RequestID, args.Budget.Source, r.SessionID, minRole, p.Role).WithData("role", p.Role).WithData("minRole", minRole)
	}
	if minRole == store.RoleAdmin {
		return nil
	}
	return sessionAllowed(ctx, s.access, s.log, p, method, minRole, r.SessionID)
}

// RespondApproval answers a pending request; the first answer wins.
func (s *ApprovalServer) RespondApproval(ctx context.Context, req *trellisv1.RespondApprovalRequest) (*trellisv1.RespondApprovalResponse, error) {
	if req.GetRequestId() == "" {
		return nil, errs.New(errcode.InvalidParams, "requestId is required")
	}
	for _, r := range s.broker.List(approvalCaller(ctx), "") {
		if r.RequestID == req.GetRequestId() {
			if err := s.hidden(ctx, "/trellis.v1.ApprovalService/RespondApproval", store.RoleApprover, r.SessionID); err != nil {
				return nil, err
			}
			if r.Tool == approval.BudgetTool && req.GetDecision() == approval.DecisionAllow {
				if err := s.mayRaise(ctx, r); err != nil {
					return nil, err
				}
			}
			break
		}
	}
	err := s.broker.Respond(ctx, approvalCaller(ctx), req.GetRequestId(), req.GetDecision(), req.GetScope(), req.GetReason())
	if err != nil {
		return nil, err
	}
	return &trellisv1.RespondApprovalResponse{Ok: true}, nil
}

// AddAllowlistPattern adds an allowlist entry (scope project by default).
// An omitted subject (workdir for project, sessionId for session) is taken
// from the caller's session when it has exactly one.
func (s *ApprovalServer) AddAllowlistPattern(ctx context.Context, req *trellisv1.AddAllowlistPatternRequest) (*trellisv1.AddAllowlistPatternResponse, error) {
	scope, workdir, sessionID := req.GetScope(), req.GetWorkdir(), req.GetSessionId()
	var field string
	switch {
	case (scope == "" || scope == approval.ScopeProject) && workdir == "":
		field = "workdir"
	case scope == approval.ScopeSession && sessionID == "":
		field = "sessionId"
	}
	if field != "" {
		own, err := callerSession(ctx, s.mine, field, "permission.allowlist.add")
		if err != nil {
			return nil, err
		}
		if field == "workdir" {
			workdir = own.Workdir
		} else {
			sessionID, workdir = own.SessionID, own.Workdir
		}
	}
	by, _ := auth.PrincipalFrom(ctx)
	id, err := s.allow.Add(ctx, req.GetPattern(), scope, workdir, sessionID, by)
	if err != nil {
		return nil, err
	}
	return &trellisv1.AddAllowlistPatternResponse{PatternId: id}, nil
}

// ListAllowlistPatterns lists allowlist entries, oldest first.
func (s *ApprovalServer) ListAllowlistPatterns(ctx context.Context, req *trellisv1.ListAllowlistPatternsRequest) (*trellisv1.ListAllowlistPatternsResponse, error) {
	entries, err := s.allow.List(ctx, req.GetScope(), req.GetWorkdir())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListAllowlistPatternsResponse{Patterns: make([]*trellisv1.AllowlistPattern, 0, len(entries))}
	for _, e := range entries {
		out.Patterns = append(out.Patterns, &trellisv1.AllowlistPattern{
			PatternId: e.PatternID, Pattern: e.Pattern, Scope: e.Scope,
			Workdir: optional(e.Workdir), CreatedAt: FormatTime(e.CreatedAt),
			Principal: principalRef(e.PrincipalID, e.PrincipalName),
		})
	}
	return out, nil
}

// RemoveAllowlistPattern removes an allowlist entry.
func (s *ApprovalServer) RemoveAllowlistPattern(ctx context.Context, req *trellisv1.RemoveAllowlistPatternRequest) (*trellisv1.RemoveAllowlistPatternResponse, error) {
	if err := s.allow.Remove(ctx, req.GetPatternId()); err != nil {
		return nil, err
	}
	return &trellisv1.RemoveAllowlistPatternResponse{Ok: true}, nil
}

// Attach is an approver's stream. The first message must be
// start{originId}; the server answers ready{originId}, then sends the
// requests of the sessions whose origin is originId and the resolutions of
// those requests, each tagged with its origin. Later start messages add
// more origins to the stream (one ready each), detach messages remove one
// (its pending requests are denied, as when a stream ends). The client
// answers with decision messages; a decision's request id says which origin
// answers. When the stream ends every origin of it detaches and its pending
// requests are denied.
func (s *ApprovalServer) Attach(stream grpc.BidiStreamingServer[trellisv1.AttachRequest, trellisv1.AttachResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return errs.New(errcode.InvalidParams, "the Attach stream closed before its start message")
	}
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil || strings.TrimSpace(start.GetOriginId()) == "" {
		return errs.New(errcode.InvalidParams, "the first Attach message must be start{originId, clientId?}")
	}
	m := &attachStream{s: s, ctx: ctx, group: s.broker.NewGroup(), ctl: make(chan *trellisv1.AttachRequest, 1),
		send: stream.Send, approvers: map[string]*approval.Approver{}, requests: map[string]string{}, keys: map[string]string{}}
	defer m.group.Close()
	defer m.detachAll()
	if err := m.start(start); err != nil {
		return err
	}

	recvDone := make(chan error, 1)
	go func() { recvDone <- m.read(stream) }()
	for {
		select {
		case ev := <-m.group.Events():
			msg, last := m.route(ev)
			if r := msg.GetRequest(); r != nil {
				msg.AfterSeq = s.afterSeq(ctx, r.GetSessionId())
			}
			if msg != nil {
				if err := stream.Send(msg); err != nil {
					return err
				}
			}
			if last {
				// The runtime ended the stream's last origin: replaced by a
				// newer Attach for it, dropped for not reading, or the
				// daemon is stopping.
				return nil
			}
		case req := <-m.ctl:
			var err error
			if st := req.GetStart(); st != nil {
				err = m.start(st)
			} else {
				m.detach(strings.TrimSpace(req.GetDetach().GetOriginId()))
			}
			if err != nil {
				return err
			}
		case err := <-recvDone:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// afterSeq is a request's AttachResponse.after_seq: every event its
// session stored before the request was sent is at or below it. A session
// whose last seq cannot be read gets 0 (the request is not held back).
func (s *ApprovalServer) afterSeq(ctx context.Context, sessionID string) int64 {
	if s.lastSeq == nil || sessionID == "" {
		return 0
	}
	seq, err := s.lastSeq(ctx, sessionID)
	if err != nil {
		s.log.Warn("approval request: the session's last event seq cannot be read; sending it without", "sessionId", sessionID, "err", err)
		return 0
	}
	return seq
}

// attachStream is the state of one Attach stream: the approvers of its
// origins (one approval.ApproverGroup: one goroutine for all of them) and
// the origin of each request it was sent. Its main loop (the only sender)
// handles start and detach; the reading goroutine applies decisions.
type attachStream struct {
	s     *ApprovalServer
	ctx   context.Context
	group *approval.ApproverGroup
	ctl   chan *trellisv1.AttachRequest // start and detach, from the reader
	send  func(*trellisv1.AttachResponse) error

	mu        sync.Mutex
	approvers map[string]*approval.Approver // by origin
	requests  map[string]string             // request id → origin, until resolved
	keys      map[string]string             // origin → its client's key (on_behalf_of)
}

// answerCtx is the context an answer of origin runs with, whose principal
// approval.resolved names: the stream's, or on a stream made with the
// daemon token (the facade's, which carries the approvers of all its
// WebSocket connections) the principal of the key the origin's start named
// (on_behalf_of), authenticated again now.
func (m *attachStream) answerCtx(origin string) (context.Context, error) {
	p, ok := auth.PrincipalFrom(m.ctx)
	if !ok || !p.Builtin || m.s.keys == nil {
		return m.ctx, nil
	}
	m.mu.Lock()
	key := m.keys[origin]
	m.mu.Unlock()
	if key == "" {
		return m.ctx, nil
	}
	kp, err := m.s.keys.Authenticate(m.ctx, key)
	if err != nil {
		return nil, err
	}
	return auth.WithPrincipal(m.ctx, kp), nil
}

// start adds an origin (or re-confirms one the stream carries), re-binds
// the client's sessions, and sends ready.
func (m *attachStream) start(st *trellisv1.AttachStart) error {
	origin := strings.TrimSpace(st.GetOriginId())
	if origin == "" {
		return errs.New(errcode.InvalidParams, "an Attach start message needs an originId")
	}
	m.mu.Lock()
	_, have := m.approvers[origin]
	m.mu.Unlock()
	if !have {
		ap, err := m.group.Attach(origin)
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.approvers[origin] = ap
		m.mu.Unlock()
	}
	m.mu.Lock()
	if key := st.GetOnBehalfOf(); key != "" {
		m.keys[origin] = key
	} else {
		delete(m.keys, origin)
	}
	m.mu.Unlock()
	m.s.rebindClient(st.GetClientId(), origin)
	return m.sendReady(origin)
}

func (m *attachStream) sendReady(origin string) error {
	return m.send(&trellisv1.AttachResponse{OriginId: origin,
		Msg: &trellisv1.AttachResponse_Ready{Ready: &trellisv1.AttachReady{OriginId: origin}}})
}

// route turns an origin's event into the message to send (nil: none) and
// reports whether the stream lost its last origin.
func (m *attachStream) route(oe approval.GroupEvent) (*trellisv1.AttachResponse, bool) {
	origin := oe.Approver.Origin()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.approvers[origin] != oe.Approver {
		return nil, false // detached by the client meanwhile
	}
	if oe.Ended {
		delete(m.approvers, origin)
		m.forgetLocked(origin)
		return &trellisv1.AttachResponse{OriginId: origin,
			Msg: &trellisv1.AttachResponse_Detached{Detached: &trellisv1.AttachDetach{OriginId: origin}}}, len(m.approvers) == 0
	}
	if r := oe.Event.Request; r != nil {
		m.requests[r.RequestID] = origin
	} else if r := oe.Event.Resolved; r != nil {
		delete(m.requests, r.RequestID)
	}
	msg := approverEventToProto(oe.Event)
	msg.OriginId = origin
	return msg, false
}

// detach removes an origin at the client's request; its pending requests
// are denied. Unknown origins are ignored.
func (m *attachStream) detach(origin string) {
	m.mu.Lock()
	ap := m.approvers[origin]
	delete(m.approvers, origin)
	m.forgetLocked(origin)
	m.mu.Unlock()
	if ap != nil {
		ap.Detach()
	}
}

func (m *attachStream) forgetLocked(origin string) {
	delete(m.keys, origin)
	for id, o := range m.requests {
		if o == origin {
			delete(m.requests, id)
		}
	}
}

// detachAll ends every origin of the stream.
func (m *attachStream) detachAll() {
	m.mu.Lock()
	aps := make([]*approval.Approver, 0, len(m.approvers))
	for _, ap := range m.approvers {
		aps = append(aps, ap)
	}
	clear(m.approvers)
	m.mu.Unlock()
	for _, ap := range aps {
		ap.Detach()
	}
}

// approverOf returns the approver that answers requestID: the one of the
// origin it was sent for. A request the stream does not know (resolved
// meanwhile, or never sent here) goes to the stream's only origin when it
// has one, as before streams carried several, and is otherwise dropped.
func (m *attachStream) approverOf(requestID string) *approval.Approver {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.requests[requestID]; ok {
		return m.approvers[o]
	}
	if len(m.approvers) == 1 {
		for _, ap := range m.approvers {
			return ap
		}
	}
	return nil
}

// read applies the approver's decisions until the stream ends and passes
// start and detach messages to the main loop. A decision the broker
// rejects as invalid (an unknown decision or scope) counts as an error
// reply, so the request is denied rather than left waiting for an answer
// that already came. A decision for a request that has ended meanwhile (its
// resolution is on the way) or that was not sent to this stream changes
// nothing and is dropped: the stream has no reply channel.
func (m *attachStream) read(stream grpc.BidiStreamingServer[trellisv1.AttachRequest, trellisv1.AttachResponse]) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		if msg.GetStart() != nil || msg.GetDetach() != nil {
			select {
			case m.ctl <- msg:
			case <-m.ctx.Done():
				return m.ctx.Err()
			}
			continue
		}
		d := msg.GetDecision()
		if d == nil {
			return errs.New(errcode.InvalidParams, "an Attach stream takes start, detach and decision messages only")
		}
		id := d.GetRequestId()
		ap := m.approverOf(id)
		if ap == nil {
			continue
		}
		switch r := d.GetReply(); {
		case d.Error != nil:
			_ = ap.Fail(id, d.GetError())
		case d.GetAnswer() != nil:
			actx, err := m.answerCtx(ap.Origin())
			if err != nil {
				_ = ap.Fail(id, "the answering client's key was refused: "+err.Error())
				continue
			}
			a := d.GetAnswer()
			err = ap.AnswerQuestion(actx, id, answersOf(a.GetAnswers()), a.GetDeclined(), a.GetReason())
			if errs.Is(err, errcode.InvalidParams) {
				_ = ap.Fail(id, "the answer was invalid: "+err.Error())
			}
		case r == nil:
			_ = ap.Fail(id, "the decision carried neither a reply nor an error")
		default:
			actx, err := m.answerCtx(ap.Origin())
			if err != nil {
				_ = ap.Fail(id, "the answering client's key was refused: "+err.Error())
				continue
			}
			err = ap.Answer(actx, id, approval.Reply{Decision: r.GetDecision(), Scope: r.GetScope(), Reason: r.GetReason()})
			if errs.Is(err, errcode.InvalidParams) {
				_ = ap.Fail(id, "the answer was invalid: "+err.Error())
			}
		}
	}
}

// rebindClient remembers origin for clientID and moves the client's
// sessions from its earlier origins to origin.
func (s *ApprovalServer) rebindClient(clientID, origin string) {
	if clientID == "" {
		return
	}
	s.mu.Lock()
	old := slices.DeleteFunc(slices.Clone(s.clients[clientID]), func(o string) bool { return o == origin })
	known := append(slices.Clone(old), origin)
	if len(known) > maxClientOrigins {
		known = known[len(known)-maxClientOrigins:]
	}
	s.clients[clientID] = known
	rebind := s.rebind
	s.mu.Unlock()
	if rebind != nil && len(old) > 0 {
		rebind(old, origin)
	}
}

// WatchQueue streams approval.pending and approval.resolved of the
// sessions the caller may read (as ListApprovals lists them): below
// operator, those it owns or was granted. Watch first, then
// ListApprovals, to see the whole queue. A watcher that falls too far
// behind is ended with overloaded; it should watch again and list.
func (s *ApprovalServer) WatchQueue(_ *trellisv1.WatchQueueRequest, stream grpc.ServerStreamingServer[trellisv1.WatchQueueResponse]) error {
	ctx := stream.Context()
	events := s.broker.Watch(ctx)
	// The headers tell the client that it is watching: events from now on
	// reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for ev := range events {
		if ev.Lagged {
			return errs.New(errcode.Overloaded,
				"this approval queue watcher fell too far behind and was dropped: watch again, then call ListApprovals to catch up")
		}
		session := ""
		if ev.Pending != nil {
			session = ev.Pending.SessionID
		} else if ev.Resolved != nil {
			session = ev.Resolved.SessionID
		}
		if s.hidden(ctx, "/trellis.v1.ApprovalService/WatchQueue", store.RoleViewer, session) != nil {
			continue
		}
		if err := stream.Send(queueEventToProto(ev)); err != nil {
			return err
		}
	}
	return nil
}

// approvalRequestToProto renders a request as the approval.request params.
func approvalRequestToProto(r approval.Request) *trellisv1.ApprovalRequest {
	return &trellisv1.ApprovalRequest{
		RequestId: r.RequestID, SessionId: r.SessionID, TurnId: r.TurnID, CallId: r.CallID,
		Tool: r.Tool, Args: toStruct(r.Args), PermissionTag: string(r.Tag), Risk: r.Risk,
		TimeoutSec: int32(r.TimeoutSec), ScopeHint: suggestedScope(r), Pattern: r.ScopeHint, Note: r.Note,
	}
}

// suggestedScope is approval.request's scopeHint: the scope a person would
// most likely pick. A call no pattern can cover can only be allowed once;
// others are suggested for the project (the allowlist's default scope).
func suggestedScope(r approval.Request) string {
	if r.ScopeHint == "" {
		return approval.ScopeOnce
	}
	if r.Workdir == "" {
		return approval.ScopeSession
	}
	return approval.ScopeProject
}

// questionToProto renders a question as the question.request params.
func questionToProto(r approval.Request) *trellisv1.QuestionRequest {
	m := &trellisv1.QuestionRequest{QuestionId: r.RequestID, SessionId: r.SessionID, TurnId: r.TurnID, CallId: r.CallID,
		TimeoutSec: int32(r.TimeoutSec), Questions: make([]*trellisv1.QuestionItem, len(r.Questions))}
	for i, q := range r.Questions {
		item := &trellisv1.QuestionItem{Question: q.Question, Options: make([]*trellisv1.QuestionOption, len(q.Options))}
		if q.Header != "" {
			item.Header = &q.Header
		}
		if q.Multiple {
			item.Multiple = new(true)
		}
		for j, o := range q.Options {
			item.Options[j] = &trellisv1.QuestionOption{Label: o.Label}
			if o.Description != "" {
				item.Options[j].Description = &o.Description
			}
		}
		m.Questions[i] = item
	}
	return m
}

// questionResolvedToProto renders a question's end as question.resolved.
func questionResolvedToProto(r approval.Resolution) *trellisv1.QuestionResolved {
	outcome := "answered"
	if r.Decision != approval.DecisionAllow {
		outcome = "declined"
	}
	return &trellisv1.QuestionResolved{QuestionId: r.RequestID, Outcome: outcome, By: r.By,
		Principal: principalRef(r.PrincipalID, r.PrincipalName)}
}

func resolutionToProto(r approval.Resolution) *trellisv1.ApprovalResolved {
	return &trellisv1.ApprovalResolved{RequestId: r.RequestID, Decision: r.Decision, By: r.By,
		Principal: principalRef(r.PrincipalID, r.PrincipalName)}
}

func approverEventToProto(ev approval.ApproverEvent) *trellisv1.AttachResponse {
	if ev.Request != nil && ev.Request.IsQuestion() {
		return &trellisv1.AttachResponse{Msg: &trellisv1.AttachResponse_Question{Question: questionToProto(*ev.Request)}}
	}
	if ev.Request != nil {
		return &trellisv1.AttachResponse{Msg: &trellisv1.AttachResponse_Request{Request: approvalRequestToProto(*ev.Request)}}
	}
	return &trellisv1.AttachResponse{Msg: &trellisv1.AttachResponse_Resolved{Resolved: resolutionToProto(*ev.Resolved)}}
}

func queueEventToProto(ev approval.QueueEvent) *trellisv1.WatchQueueResponse {
	switch {
	case ev.Pending != nil && ev.Pending.IsQuestion():
		return &trellisv1.WatchQueueResponse{Msg: &trellisv1.WatchQueueResponse_QuestionPending{
			QuestionPending: &trellisv1.QuestionPending{Question: questionToProto(*ev.Pending)}}}
	case ev.Resolved != nil && ev.Resolved.Question:
		return &trellisv1.WatchQueueResponse{Msg: &trellisv1.WatchQueueResponse_QuestionResolved{
			QuestionResolved: questionResolvedToProto(*ev.Resolved)}}
	}
	if ev.Pending != nil {
		return &trellisv1.WatchQueueResponse{Msg: &trellisv1.WatchQueueResponse_Pending{
			Pending: &trellisv1.ApprovalPending{Request: approvalRequestToProto(*ev.Pending)}}}
	}
	return &trellisv1.WatchQueueResponse{Msg: &trellisv1.WatchQueueResponse_Resolved{Resolved: resolutionToProto(*ev.Resolved)}}
}
