package rpc

import (
	"context"
	"errors"
	"log/slog"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"google.golang.org/grpc"

	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// SessionServer implements trellisv1.SessionServiceServer over the session
// domain and the event log.
type SessionServer struct {
	trellisv1.UnsafeSessionServiceServer
	sessions *session.Service
	events   EventSource
	access   SessionAccess // who may watch which session (SubscribeSessions); nil: anyone
	log      *slog.Logger
	ahead    readAhead // the next page of clients that page through ResumeSession
}

// NewSessionServer returns the session service. Events are read through
// the event log only; access decides which sessions a SubscribeSessions
// caller may watch (nil: every one).
func NewSessionServer(sessions *session.Service, events EventSource, access SessionAccess, log *slog.Logger) *SessionServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SessionServer{sessions: sessions, events: events, access: access, log: log}
}

// CreateSession creates a session; the caller's origin becomes its origin.
func (s *SessionServer) CreateSession(ctx context.Context, req *trellisv1.CreateSessionRequest) (*trellisv1.CreateSessionResponse, error) {
	id, err := s.sessions.Create(ctx, session.CreateParams{
		Workdir:  req.GetWorkdir(),
		Mode:     req.GetMode(),
		Provider: req.GetProvider(),
		Model:    req.GetModel(),
		Agent:    req.GetAgent(),
		Effort:   req.GetEffort(),
		DenyExec: req.GetDenyExec(),
		Origin:   originOf(ctx),
		Owner:    ownerOf(ctx),
	})
	if err != nil {
		return nil, err
	}
	return &trellisv1.CreateSessionResponse{SessionId: id}, nil
}

// ListSessions lists sessions, newest first.
func (s *SessionServer) ListSessions(ctx context.Context, req *trellisv1.ListSessionsRequest) (*trellisv1.ListSessionsResponse, error) {
	sums, err := s.sessions.ListVisible(ctx, req.GetIncludeClosed(), req.GetArchived(), req.GetWorkdir(), visibleTo(ctx))
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListSessionsResponse{Sessions: make([]*trellisv1.SessionSummary, 0, len(sums))}
	for _, sum := range sums {
		out.Sessions = append(out.Sessions, summaryToProto(sum))
	}
	return out, nil
}

func summaryToProto(sum session.Summary) *trellisv1.SessionSummary {
	r := sum.Row
	p := &trellisv1.SessionSummary{
		SessionId:        r.SessionID,
		Workdir:          r.Workdir,
		Mode:             r.Mode,
		Provider:         optional(r.Provider),
		Model:            optional(r.Model),
		CreatedAt:        FormatTime(r.CreatedAt),
		Seq:              r.LastSeq,
		Kind:             r.Kind,
		ParentSessionId:  optional(r.ParentSessionID),
		JobId:            optional(r.JobID),
		Agent:            optional(r.Agent),
		Status:           sum.Status,
		Running:          sum.Running,
		Title:            optional(r.Title),
		LastPrompt:       optional(r.LastPrompt),
		PendingApprovals: int32(sum.PendingApprovals),
		Workspace:        "unmanaged",
	}
	if r.Workspace == store.WorkspaceManaged {
		p.Workspace = "managed"
	}
	if !r.LastActivityAt.IsZero() {
		p.LastActivityAt = optional(FormatTime(r.LastActivityAt))
	}
	return p
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MaxSendMsgSize is the largest message the runtime's gRPC server sends:
// the largest event it delivers (eventlog.MaxEventBytes).
const MaxSendMsgSize = eventlog.MaxEventBytes

// MaxResumeBytes bounds one session.resume answer, over gRPC, REST and
// the WebSocket alike: about 64 KiB of events (payload plus
// eventlog.Overhead each; one event at least, whatever its size). The
// answer is the one stage of a long resume that is not pipelined (it is
// read whole, then written, then decoded whole by the client), while what
// follows it is: over the WebSocket the rest follows as session.event
// notifications at once; a gRPC or REST client resumes again from the
// last seq it got, and its next pages are read ahead (readAhead). Small,
// so that a long resume streams.
const MaxResumeBytes = 64 << 10

// ResumeSession registers the caller's resume (its origin) and returns the
// stored events after afterSeq, at most MaxResumeBytes of them, with more
// set when the session has later stored events: as one EventPage (the
// stored objects, as Subscribe sends them), or typed when the request says
// so. An event too large for any gRPC message is payload_too_large, naming
// the limit.
func (s *SessionServer) ResumeSession(ctx context.Context, req *trellisv1.ResumeSessionRequest) (*trellisv1.ResumeSessionResponse, error) {
	if req.GetAfterSeq() < 0 {
		return nil, errs.New(errcode.InvalidParams, "afterSeq must be 0 or more (got %d)", req.GetAfterSeq())
	}
	row, err := s.sessions.Resume(ctx, req.GetSessionId(), originOf(ctx))
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ResumeSessionResponse{
		SessionId: row.SessionID, Mode: row.Mode, Provider: row.Provider, Model: row.Model,
	}
	if req.GetTyped() {
		cur, err := s.events.Watch(ctx, row.SessionID, req.GetAfterSeq(), nil)
		if err != nil {
			return nil, err
		}
		defer cur.Close()
		_, caughtUp, err := cur.Visit(ctx, 0, MaxResumeBytes, func(e *store.Event) error {
			pe, err := EventToProto(*e) // decodes the payload: nothing of the store's buffer is kept
			out.TypedEvents = append(out.TypedEvents, pe)
			return err
		})
		if err != nil {
			return nil, err
		}
		out.More = !caughtUp && cur.Behind()
		return out, nil
	}
	key := pageKey{row.SessionID, req.GetAfterSeq()}
	page, more, paging := s.ahead.take(ctx, key)
	if page == nil {
		if page, more, err = s.resumePage(ctx, key); err != nil {
			return nil, err
		}
	}
	out.Events, out.More = page, more
	if seqs := page.GetSeqs(); more && len(seqs) > 0 {
		next := pageKey{row.SessionID, seqs[len(seqs)-1]}
		s.ahead.ended(next, paging, func(ctx context.Context) (*trellisv1.EventPage, bool, error) {
			return s.resumePage(ctx, next)
		})
	}
	return out, nil
}

// resumePage reads the stored events after key.after, at most
// MaxResumeBytes of them, as one page (nil when there are none), and
// whether the session has later stored events.
func (s *SessionServer) resumePage(ctx context.Context, key pageKey) (*trellisv1.EventPage, bool, error) {
	cur, err := s.events.Watch(ctx, key.session, key.after, nil)
	if err != nil {
		return nil, false, err
	}
	defer cur.Close()
	// The answer owns its page (it is encoded after the call returns): no
	// pooled buffers, but room for the usual answer at once (an event's
	// object is about its payload plus eventlog.Overhead).
	page := &eventPage{render: codec.NewStoredEvents(key.session), json: make([]byte, 0, MaxResumeBytes+MaxResumeBytes/4)}
	_, caughtUp, err := cur.Visit(ctx, 0, MaxResumeBytes, page.add)
	if err != nil {
		return nil, false, err
	}
	more := !caughtUp && cur.Behind()
	if len(page.ends) == 0 {
		return nil, more, nil
	}
	return page.message(), more, nil
}

// CloseSession interrupts and closes a session.
func (s *SessionServer) CloseSession(ctx context.Context, req *trellisv1.CloseSessionRequest) (*trellisv1.CloseSessionResponse, error) {
	if err := s.sessions.Close(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	return &trellisv1.CloseSessionResponse{Ok: true}, nil
}

// Prompt starts or queues a turn.
func (s *SessionServer) Prompt(ctx context.Context, req *trellisv1.PromptRequest) (*trellisv1.PromptResponse, error) {
	atts := make([]session.Attachment, 0, len(req.GetAttachments()))
	for _, a := range req.GetAttachments() {
		atts = append(atts, session.Attachment{
			Kind: a.GetKind(), Name: a.GetName(), Path: a.GetPath(), Data: a.GetData(),
			MimeType: a.GetMimeType(), Text: a.GetText(),
		})
	}
	turnID, err := s.sessions.PromptWhenBusy(ctx, req.GetSessionId(), req.GetText(), atts, originOf(ctx), req.GetWhenBusy())
	if err != nil {
		return nil, err
	}
	return &trellisv1.PromptResponse{TurnId: turnID}, nil
}

// Steer sends text into the running turn, or starts a turn with it.
func (s *SessionServer) Steer(ctx context.Context, req *trellisv1.SteerRequest) (*trellisv1.SteerResponse, error) {
	turnID, started, err := s.sessions.Steer(ctx, req.GetSessionId(), req.GetText(), originOf(ctx))
	if err != nil {
		return nil, err
	}
	return &trellisv1.SteerResponse{Ok: true, Started: started, TurnId: turnID}, nil
}

// ListQueue lists the prompts queued behind the running turn.
func (s *SessionServer) ListQueue(ctx context.Context, req *trellisv1.ListQueueRequest) (*trellisv1.ListQueueResponse, error) {
	queue, err := s.sessions.Queue(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListQueueResponse{Prompts: make([]*trellisv1.QueuedPrompt, 0, len(queue))}
	for _, q := range queue {
		out.Prompts = append(out.Prompts, &trellisv1.QueuedPrompt{TurnId: q.TurnID, Position: int32(q.Position), Prompt: q.Prompt, Attachments: int32(q.Attachments)})
	}
	return out, nil
}

// RemoveQueued removes one queued prompt.
func (s *SessionServer) RemoveQueued(ctx context.Context, req *trellisv1.RemoveQueuedRequest) (*trellisv1.RemoveQueuedResponse, error) {
	if err := s.sessions.RemoveQueued(ctx, req.GetSessionId(), req.GetTurnId()); err != nil {
		return nil, err
	}
	return &trellisv1.RemoveQueuedResponse{Ok: true}, nil
}

// ClearQueue removes every queued prompt.
func (s *SessionServer) ClearQueue(ctx context.Context, req *trellisv1.ClearQueueRequest) (*trellisv1.ClearQueueResponse, error) {
	n, err := s.sessions.ClearQueue(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	return &trellisv1.ClearQueueResponse{Removed: int32(n)}, nil
}

// Interrupt stops the running turn and drops the queue.
func (s *SessionServer) Interrupt(ctx context.Context, req *trellisv1.InterruptRequest) (*trellisv1.InterruptResponse, error) {
	if err := s.sessions.Interrupt(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	return &trellisv1.InterruptResponse{Ok: true}, nil
}

// Compact summarises older history.
func (s *SessionServer) Compact(ctx context.Context, req *trellisv1.CompactRequest) (*trellisv1.CompactResponse, error) {
	res, err := s.sessions.Compact(ctx, req.GetSessionId(), req.GetInstructions())
	if err != nil {
		return nil, err
	}
	return &trellisv1.CompactResponse{Before: int64(res.Before), After: int64(res.After), SummaryChars: int64(res.SummaryChars)}, nil
}

// DeleteSaved deletes saved, non-live sessions.
func (s *SessionServer) DeleteSaved(ctx context.Context, req *trellisv1.DeleteSavedRequest) (*trellisv1.DeleteSavedResponse, error) {
	n, ws, err := s.sessions.DeleteSavedWorkspaces(ctx, session.DeleteSelector{
		SessionID: req.GetSessionId(), Workdir: req.GetWorkdir(), All: req.GetAll(),
		DeleteWorkspace: req.GetDeleteWorkspace(),
	})
	if err != nil {
		return nil, err
	}
	return &trellisv1.DeleteSavedResponse{Deleted: int32(n), WorkspacesDeleted: int32(ws)}, nil
}

// SetMode changes the session's mode.
func (s *SessionServer) SetMode(ctx context.Context, req *trellisv1.SetModeRequest) (*trellisv1.SetModeResponse, error) {
	mode, err := s.sessions.SetMode(ctx, req.GetSessionId(), req.GetMode())
	if err != nil {
		return nil, err
	}
	return &trellisv1.SetModeResponse{Mode: mode}, nil
}

// EventSource is the read side of runtime/eventlog.
type EventSource interface {
	Watch(ctx context.Context, sessionID string, afterSeq int64, notify func()) (*eventlog.Cursor, error)
}

// Subscribe streams a session's events: replay after afterSeq (a negative
// afterSeq starts at the current end), a caughtUp marker, then live events:
// one page per message of what is ready at once (a page of the store while
// it replays), or, typed, one SessionEvent per message.
func (s *SessionServer) Subscribe(req *trellisv1.SubscribeRequest, stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) error {
	ctx := stream.Context()
	id := req.GetSessionId()
	if _, err := s.sessions.Get(ctx, id); err != nil {
		return err
	}
	ready := make(chan struct{}, 1)
	cur, err := s.events.Watch(ctx, id, req.GetAfterSeq(), func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer cur.Close()
	p := newEventPage(id)
	defer p.release()
	var typed []*trellisv1.SessionEvent
	visit := p.add
	if req.GetTyped() {
		visit = func(e *store.Event) error {
			ev, err := EventToProto(*e)
			if err == nil {
				typed = append(typed, ev)
			}
			return err
		}
	}
	for {
		// The page is sent once read: the store's read is not held open
		// while a slow client takes it.
		n, caughtUp, err := cur.Visit(ctx, maxPageEvents, maxPageBytes, visit)
		if len(p.seqs) > 0 {
			if err := stream.Send(&trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_Events{Events: p.message()}}); err != nil {
				return err
			}
			p.reset()
		}
		for i, ev := range typed {
			if err := stream.Send(&trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_Event{Event: ev}}); err != nil {
				return err
			}
			typed[i] = nil
		}
		typed = typed[:0]
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return streamError(id, err)
		}
		if caughtUp {
			if err := stream.Send(&trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_CaughtUp{CaughtUp: &trellisv1.CaughtUp{Seq: cur.Last()}}}); err != nil {
				return err
			}
		}
		if n > 0 || caughtUp {
			continue
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil
		}
	}
}

// streamError is the error a session's event stream ends with: the
// protocol error it is, else internal.
func streamError(sessionID string, err error) error {
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	return errs.Wrap(errcode.Internal, err, "the event stream of session %s ended: %v", sessionID, err)
}

// SetModel pins the session's model (snowpea 1.7's session.setModel).
func (s *SessionServer) SetModel(ctx context.Context, req *trellisv1.SetModelRequest) (*trellisv1.SetModelResponse, error) {
	pin, err := s.sessions.SetModelPin(ctx, req.GetSessionId(), req.GetModel())
	if err != nil {
		return nil, err
	}
	return &trellisv1.SetModelResponse{Model: optional(pin.Model), Pinned: pin.Pinned, Provider: optional(pin.Provider)}, nil
}

// SetEffort pins the session's reasoning effort (snowpea 1.7's
// session.setEffort).
func (s *SessionServer) SetEffort(ctx context.Context, req *trellisv1.SetEffortRequest) (*trellisv1.SetEffortResponse, error) {
	effort, err := s.sessions.SetEffort(ctx, req.GetSessionId(), req.GetEffort())
	if err != nil {
		return nil, err
	}
	res := &trellisv1.SetEffortResponse{
		SessionId: req.GetSessionId(), Effort: optional(effort), Pinned: optional(effort),
		EffortSource: "default", Efforts: session.EffortNames(),
	}
	if effort != "" {
		res.EffortSource = "session"
	}
	return res, nil
}

// Rename sets the session's title.
func (s *SessionServer) Rename(ctx context.Context, req *trellisv1.RenameRequest) (*trellisv1.RenameResponse, error) {
	if err := s.sessions.Rename(ctx, req.GetSessionId(), req.GetTitle()); err != nil {
		return nil, err
	}
	return &trellisv1.RenameResponse{Ok: true}, nil
}

// Notice queues a line for the session's next model call.
func (s *SessionServer) Notice(ctx context.Context, req *trellisv1.NoticeRequest) (*trellisv1.NoticeResponse, error) {
	if err := s.sessions.Notice(ctx, req.GetSessionId(), req.GetText()); err != nil {
		return nil, err
	}
	return &trellisv1.NoticeResponse{Ok: true}, nil
}

// SetBrowserProvider chooses the provider of the session's browser tool.
func (s *SessionServer) SetBrowserProvider(ctx context.Context, req *trellisv1.SetBrowserProviderRequest) (*trellisv1.SetBrowserProviderResponse, error) {
	if err := s.sessions.SetBrowserProvider(ctx, req.GetSessionId(), req.GetProvider()); err != nil {
		return nil, err
	}
	return &trellisv1.SetBrowserProviderResponse{Provider: req.GetProvider()}, nil
}

// ListArtifacts lists the files under the session workdir's artifacts/.
func (s *SessionServer) ListArtifacts(ctx context.Context, req *trellisv1.ListArtifactsRequest) (*trellisv1.ListArtifactsResponse, error) {
	arts, dir, err := s.sessions.Artifacts(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListArtifactsResponse{WorkspaceDir: dir, Artifacts: make([]*trellisv1.Artifact, 0, len(arts))}
	for _, a := range arts {
		out.Artifacts = append(out.Artifacts, &trellisv1.Artifact{
			Name: a.Name, Path: a.Path, Size: a.Size, ModifiedAt: FormatTime(a.Modified), MimeType: optional(a.MimeType),
		})
	}
	return out, nil
}

// CompleteFile completes a partial path under a session's (or a) workdir.
func (s *SessionServer) CompleteFile(ctx context.Context, req *trellisv1.CompleteFileRequest) (*trellisv1.CompleteFileResponse, error) {
	limit := int32(30)
	if req.Limit != nil {
		limit = req.GetLimit()
	}
	ents, truncated, err := s.sessions.CompleteFile(ctx, session.CompleteQuery{
		SessionID: req.GetSessionId(), Workdir: req.GetWorkdir(), Owner: ownerOf(ctx),
		Query: req.GetQuery(), Limit: int(limit),
	})
	if err != nil {
		return nil, err
	}
	out := &trellisv1.CompleteFileResponse{Truncated: truncated, Entries: make([]*trellisv1.FileEntry, 0, len(ents))}
	for _, e := range ents {
		fe := &trellisv1.FileEntry{Kind: "file", Path: e.Path}
		if e.Dir {
			fe.Kind = "dir"
		} else {
			fe.Size = &e.Size
		}
		out.Entries = append(out.Entries, fe)
	}
	return out, nil
}

// ToolContent returns a recent tool call's result as content blocks.
func (s *SessionServer) ToolContent(ctx context.Context, req *trellisv1.ToolContentRequest) (*trellisv1.ToolContentResponse, error) {
	res, err := s.sessions.ToolResult(ctx, req.GetSessionId(), req.GetCallId())
	if err != nil {
		return nil, err
	}
	text := res.Output
	if !res.OK && res.Error != nil {
		text = *res.Error
	}
	return &trellisv1.ToolContentResponse{CallId: res.CallID, Content: []*trellisv1.ContentBlock{{Type: "text", Text: &text}}}, nil
}

// budgetToProto is a budget as the wire carries it.
func budgetToProto(b events.Budget) *trellisv1.Budget {
	return &trellisv1.Budget{MaxCostMicroUsd: b.MaxCostMicroUsd, MaxTokens: b.MaxTokens, Source: b.Source, PrincipalId: b.PrincipalID}
}

// SetBudget sets the session's own budget and reports the one in force.
func (s *SessionServer) SetBudget(ctx context.Context, req *trellisv1.SetBudgetRequest) (*trellisv1.SetBudgetResponse, error) {
	info, err := s.sessions.SetBudget(ctx, req.GetSessionId(), session.Limits{MaxCostMicroUSD: req.MaxCostMicroUsd, MaxTokens: req.MaxTokens})
	if err != nil {
		return nil, err
	}
	return &trellisv1.SetBudgetResponse{
		Budget: budgetToProto(info.Budget),
		Spent:  &trellisv1.BudgetSpent{CostMicroUsd: info.Spent.CostMicroUsd, Tokens: info.Spent.Tokens},
		Paused: info.Paused,
	}, nil
}

// ForkSession makes a new session from one as it was at one of its
// events; the caller becomes the new session's origin and owner.
func (s *SessionServer) ForkSession(ctx context.Context, req *trellisv1.ForkSessionRequest) (*trellisv1.ForkSessionResponse, error) {
	res, err := s.sessions.Fork(ctx, session.ForkParams{SessionID: req.GetSessionId(), AtSeq: req.GetAtSeq(),
		Workdir: req.GetWorkdir(), Origin: originOf(ctx), Owner: ownerOf(ctx)})
	if err != nil {
		return nil, err
	}
	return &trellisv1.ForkSessionResponse{SessionId: res.SessionID, Workdir: res.Workdir,
		CheckpointId: optionalString(res.CheckpointID), Messages: int32(res.Messages)}, nil
}

// RewindSession puts an idle session's files and model history back as
// they were at one of its events.
func (s *SessionServer) RewindSession(ctx context.Context, req *trellisv1.RewindSessionRequest) (*trellisv1.RewindSessionResponse, error) {
	res, err := s.sessions.Rewind(ctx, req.GetSessionId(), req.GetAtSeq(), req.GetForce())
	if err != nil {
		return nil, err
	}
	return &trellisv1.RewindSessionResponse{Seq: res.Seq, CheckpointId: optionalString(res.CheckpointID),
		Messages: int32(res.Messages)}, nil
}
