package rpc

import (
	"context"
	"errors"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"google.golang.org/grpc"

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
	store    store.EventStore
}

// NewSessionServer returns the session service.
func NewSessionServer(sessions *session.Service, events EventSource, st store.EventStore) *SessionServer {
	return &SessionServer{sessions: sessions, events: events, store: st}
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
	sums, err := s.sessions.ListVisible(ctx, req.GetIncludeClosed(), req.GetWorkdir(), visibleTo(ctx))
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

// maxResumeEvents bounds the events one session.resume answer carries; a
// client that needs more resumes again from the last seq it got, or uses
// Subscribe, which pages through the store.
const maxResumeEvents = 200_000

// MaxSendMsgSize is the largest message the runtime's gRPC server sends.
const MaxSendMsgSize = 64 << 20

// maxResumeBytes bounds the stored payload bytes of one ResumeSession
// answer, under gRPC's default receive limit of 4 MiB for small events so
// that stock clients page through a long session. An event larger than
// this comes alone in its answer.
const maxResumeBytes = 3 << 20

// eventOverhead is a generous estimate of an event's encoded size besides
// its payload (session id, seq, kind, ts and framing).
const eventOverhead = 128

// ResumeSession returns the stored events after afterSeq, paged: one
// answer holds at most maxResumeEvents events and maxResumeBytes of
// payload (one event at least), and says more when the session has later
// events; the client resumes again from the last seq it got. Callers that
// want the live tail too use Subscribe from the last returned seq (the
// facade does), which continues with no gap and no duplicate. An event
// too large for any gRPC message is payload_too_large, naming the limit.
func (s *SessionServer) ResumeSession(ctx context.Context, req *trellisv1.ResumeSessionRequest) (*trellisv1.ResumeSessionResponse, error) {
	if req.GetAfterSeq() < 0 {
		return nil, errs.New(errs.InvalidParams, "afterSeq must be 0 or more (got %d)", req.GetAfterSeq())
	}
	row, err := s.sessions.Resume(ctx, req.GetSessionId(), originOf(ctx))
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ResumeSessionResponse{
		SessionId: row.SessionID, Mode: row.Mode, Provider: row.Provider, Model: row.Model,
	}
	target, err := s.events.LastSeq(ctx, row.SessionID)
	if err != nil {
		return nil, err
	}
	last, size, pages := req.GetAfterSeq(), 0, pager{}
	for last < target {
		n, bytes, err := s.scanStored(ctx, row.SessionID, last, min(pages.next(), maxResumeEvents-len(out.Events)), func(e *store.Event) error {
			n := len(e.Payload) + eventOverhead
			if n > MaxSendMsgSize {
				return tooLarge(*e, n)
			}
			if len(out.Events) > 0 && size+n > maxResumeBytes {
				out.More = true
				return errPageFull
			}
			// EventToProto decodes the payload (no reference to the
			// store's buffer is kept).
			pe, err := EventToProto(*e)
			if err != nil {
				return err
			}
			out.Events = append(out.Events, pe)
			size += n
			last = e.Seq
			return nil
		})
		if err != nil || out.More {
			return out, err
		}
		if n == 0 {
			break
		}
		pages.observeSize(n, bytes)
		if len(out.Events) >= maxResumeEvents {
			out.More = last < target
			return out, nil
		}
	}
	return out, nil
}

// tooLarge is the error of an event no gRPC message can carry.
func tooLarge(e store.Event, size int) error {
	return errs.New(errs.PayloadTooLarge, "event %d of session %s (%s) is %d bytes, over the limit of %d bytes for one message; read the events after it (afterSeq %d)",
		e.Seq, e.SessionID, e.Kind, size, MaxSendMsgSize, e.Seq).
		WithData("limit", int64(MaxSendMsgSize)).WithData("size", int64(size))
}

// pager sizes store pages to about pageBytes of payload: few queries for
// small events, bounded memory for large ones. Pages start at 256 events
// and at most double from one to the next, so that the first events of a
// long replay go out after a short read (a session.resume answer holds
// about 500 small events: two pages) rather than after a page of 4,096.
type pager struct{ limit int }

const (
	pageBytes    = 1 << 20
	minPageLimit = 8
	maxPageLimit = 4096
)

func (p *pager) next() int {
	if p.limit == 0 {
		p.limit = 256
	}
	return p.limit
}

// observe adapts the next page's limit to the sizes of this one.
func (p *pager) observe(page []store.Event) {
	var n int
	for i := range page {
		n += len(page[i].Payload) + eventOverhead
	}
	p.observeSize(len(page), n)
}

// observeSize adapts the next page's limit to a page of rows events and
// size bytes (payloads and eventOverhead each).
func (p *pager) observeSize(rows, size int) {
	avg := max(size/max(rows, 1), 1)
	p.limit = min(max(pageBytes/avg, minPageLimit), maxPageLimit, 2*p.next())
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

// EventSource is the subscribe side of runtime/eventlog.
type EventSource interface {
	Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*eventlog.Subscription, error)
	Watch(ctx context.Context, sessionID string, afterSeq int64, notify func()) (*eventlog.Cursor, error)
	LastSeq(ctx context.Context, sessionID string) (int64, error)
}

// Subscribe streams a session's events: replay after afterSeq (a negative
// afterSeq starts at the current end), a caughtUp marker, then live events.
func (s *SessionServer) Subscribe(req *trellisv1.SubscribeRequest, stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) error {
	ctx := stream.Context()
	if _, err := s.sessions.Get(ctx, req.GetSessionId()); err != nil {
		return err
	}
	after := req.GetAfterSeq()
	if after < 0 {
		last, err := s.events.LastSeq(ctx, req.GetSessionId())
		if err != nil {
			return err
		}
		after = last
	}
	if req.GetRawPayload() && req.GetRawBatches() {
		return s.subscribeBatches(ctx, req.GetSessionId(), after, req.GetRendered(), req.GetRenderedFrames(), stream)
	}
	sub, err := s.events.Subscribe(ctx, req.GetSessionId(), after)
	if err != nil {
		return err
	}
	defer sub.Close()
	last := after
	for item := range sub.Items() {
		var resp *trellisv1.SubscribeResponse
		if item.CaughtUp {
			resp = &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_CaughtUp{CaughtUp: &trellisv1.CaughtUp{Seq: last}}}
		} else if req.GetRawPayload() {
			// The stored bytes are already the protocol's rendering.
			last = item.Event.Seq
			resp = &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_RawEvent{RawEvent: EventToRaw(*item.Event)}}
		} else {
			ev, err := EventToProto(*item.Event)
			if err != nil {
				return err
			}
			last = ev.Seq
			resp = &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_Event{Event: ev}}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	if err := sub.Err(); err != nil && ctx.Err() == nil {
		return errs.Wrap(errs.Internal, err, "the event stream of session %s ended: %v", req.GetSessionId(), err)
	}
	return nil
}

// maxBatchBytes bounds the payload bytes of one raw_events item; a larger
// event travels alone.
const maxBatchBytes = 1 << 20

// subscribeBatches is Subscribe with raw_batches: the replay is read from
// the store in pages and sent a page per message (no per-event handoff or
// message), then the event log's subscription continues from the last
// replayed seq — it replays what was committed meanwhile, then the live
// events, sent together when several are ready at once. With rendered,
// the events travel as rendered_events (renderedPage), as their
// notification frames with frames.
func (s *SessionServer) subscribeBatches(ctx context.Context, sessionID string, after int64, rendered, frames bool, stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) error {
	target, err := s.events.LastSeq(ctx, sessionID)
	if err != nil {
		return err
	}
	var b batcher = &rawBatcher{}
	if rendered {
		p := newRenderedPage(sessionID, frames)
		defer p.release()
		b = p
	}
	last := after
	if p, ok := b.(*renderedPage); ok {
		if last, err = s.replayRendered(ctx, sessionID, after, target, p, stream); err != nil {
			return err
		}
	}
	pages := pager{}
	for last < target {
		page, err := s.store.ReadEvents(ctx, sessionID, last, pages.next())
		if err != nil {
			return errs.Wrap(errs.Internal, err, "cannot read the stored events of session %s: %v", sessionID, err)
		}
		if len(page) == 0 {
			break
		}
		pages.observe(page)
		for i := range page {
			if err := b.add(stream, &page[i]); err != nil {
				return err
			}
		}
		if err := b.flush(stream); err != nil {
			return err
		}
		last = page[len(page)-1].Seq
	}
	sub, err := s.events.Subscribe(ctx, sessionID, last)
	if err != nil {
		return err
	}
	defer sub.Close()
	items := sub.Items()
	for item := range items {
		// Take what else is ready, without waiting, into the same message.
	more:
		for {
			if item.CaughtUp {
				if err := b.flush(stream); err != nil {
					return err
				}
				if err := stream.Send(&trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_CaughtUp{CaughtUp: &trellisv1.CaughtUp{Seq: last}}}); err != nil {
					return err
				}
			} else {
				if err := b.add(stream, item.Event); err != nil {
					return err
				}
				last = item.Event.Seq
			}
			select {
			case next, ok := <-items:
				if !ok {
					break more
				}
				item = next
			default:
				break more
			}
		}
		if err := b.flush(stream); err != nil {
			return err
		}
	}
	if err := sub.Err(); err != nil && ctx.Err() == nil {
		return errs.Wrap(errs.Internal, err, "the event stream of session %s ended: %v", sessionID, err)
	}
	return nil
}

// replayRendered sends the stored events after `after` up to target as
// rendered pages, read with the store's EventScanner (no allocation per
// row) when it has one. It returns the last seq sent: the caller reads
// the rest, if any, with ReadEvents.
func (s *SessionServer) replayRendered(ctx context.Context, sessionID string, after, target int64, p *renderedPage, stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) (int64, error) {
	last, pages := after, pager{}
	for last < target {
		n, size, err := s.scanStored(ctx, sessionID, last, pages.next(), func(e *store.Event) error {
			last = e.Seq
			return p.addEvent(e)
		})
		if err != nil {
			return last, err
		}
		if n == 0 {
			break
		}
		pages.observeSize(n, size)
		// Sent once the page is read: the store's read is not held open
		// while a slow client takes the page.
		if err := p.flush(stream); err != nil {
			return last, err
		}
	}
	return last, nil
}

// errPageFull, returned by scanStored's callback, ends the read early
// without an error.
var errPageFull = errors.New("rpc: page full")

// scanStored reads at most limit stored events of the session after
// `after`, in seq order, and hands each to fn: through the store's
// EventScanner (no allocation per row) when it has one — the event's
// Payload then points into the store's buffer, valid only during the call
// — else through ReadEvents. It returns the events handed over and their
// payload bytes plus eventOverhead each (for pager). An error of fn is
// returned as it is (errPageFull: none), a store error as internal.
func (s *SessionServer) scanStored(ctx context.Context, sessionID string, after int64, limit int, fn func(e *store.Event) error) (n, size int, err error) {
	var fnErr error
	call := func(e *store.Event) error {
		n, size = n+1, size+len(e.Payload)+eventOverhead
		fnErr = fn(e)
		return fnErr
	}
	if sc, ok := s.store.(store.EventScanner); ok {
		e := store.Event{SessionID: sessionID}
		err = sc.ScanEvents(ctx, sessionID, after, limit, func(r *store.EventRow) error {
			if string(r.Kind) != e.Kind {
				e.Kind = string(r.Kind) // rows of one kind share the string
			}
			e.Seq, e.TS, e.Payload = r.Seq, r.TS, r.Payload
			return call(&e)
		})
	} else {
		var page []store.Event
		if page, err = s.store.ReadEvents(ctx, sessionID, after, limit); err == nil {
			for i := range page {
				if call(&page[i]) != nil {
					break
				}
			}
		}
	}
	switch {
	case fnErr == errPageFull:
		return n, size, nil
	case fnErr != nil:
		return n, size, fnErr
	case err != nil:
		return n, size, errs.Wrap(errs.Internal, err, "cannot read the stored events of session %s: %v", sessionID, err)
	}
	return n, size, nil
}

// batcher collects events into the messages of a batched Subscribe.
type batcher interface {
	add(stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse], e *store.Event) error
	flush(stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) error
}

func (p *renderedPage) add(stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse], e *store.Event) error {
	if len(p.json) > 0 && len(p.json)+len(e.Payload)+eventOverhead > maxBatchBytes {
		if err := p.flush(stream); err != nil {
			return err
		}
	}
	return p.addEvent(e)
}

// rawBatcher collects raw events into raw_events items of at most
// maxBatchBytes of payload.
type rawBatcher struct {
	events []*trellisv1.RawEvent
	size   int
}

func (b *rawBatcher) add(stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse], e *store.Event) error {
	n := len(e.Payload) + eventOverhead
	if n > MaxSendMsgSize {
		return tooLarge(*e, n)
	}
	if len(b.events) > 0 && b.size+n > maxBatchBytes {
		if err := b.flush(stream); err != nil {
			return err
		}
	}
	b.events = append(b.events, EventToRaw(*e))
	b.size += n
	return nil
}

func (b *rawBatcher) flush(stream grpc.ServerStreamingServer[trellisv1.SubscribeResponse]) error {
	if len(b.events) == 0 {
		return nil
	}
	err := stream.Send(&trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_RawEvents{RawEvents: &trellisv1.RawEvents{Events: b.events}}})
	// The message is encoded by Send: the slice can be reused.
	clear(b.events)
	b.events, b.size = b.events[:0], 0
	return err
}
