package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
)

// LentOptions are what tool.register and ServeLentTools need.
type LentOptions struct {
	Lent *tool.Lent
	// Owners, in a cluster, says which daemon serves a session: tools are
	// lent only to the sessions this daemon serves (nil: all are).
	Owners Owners
	// LastSeq gives a call's after_seq (nil: 0).
	LastSeq func(ctx context.Context, sessionID string) (int64, error)
}

// WithLent makes s serve client-lent tools (tool.register,
// tool.unregister, ServeLentTools).
func (s *ToolServer) WithLent(o LentOptions) *ToolServer {
	s.lent = o
	return s
}

// RegisterTools lends the caller's connection's tools to a session, or to
// every session its origin originates.
func (s *ToolServer) RegisterTools(ctx context.Context, req *trellisv1.RegisterToolsRequest) (*trellisv1.RegisterToolsResponse, error) {
	if s.lent.Lent == nil {
		return nil, errs.NewUnsupported("method", "tool.register", "this daemon does not take lent tools")
	}
	defs := make([]tool.LentDef, 0, len(req.GetTools()))
	for _, t := range req.GetTools() {
		d := tool.LentDef{Name: t.GetName(), Description: t.GetDescription(), Tag: approval.Tag(t.GetPermission()), Replace: t.GetReplace()}
		if t.InputSchema != nil {
			raw, err := json.Marshal(t.GetInputSchema().AsMap())
			if err != nil {
				return nil, errs.New(errcode.InvalidParams, "tools: inputSchema of %s: %v", t.GetName(), err)
			}
			d.Schema = raw
		}
		if t.TimeoutSec != nil {
			if t.GetTimeoutSec() <= 0 {
				return nil, errs.New(errcode.InvalidParams, "tools: timeoutSec of %s must be positive (got %d)", t.GetName(), t.GetTimeoutSec()).WithData("field", "timeoutSec")
			}
			d.Timeout = time.Duration(t.GetTimeoutSec()) * time.Second
		}
		defs = append(defs, d)
	}
	id := req.GetSessionId()
	info, err := s.lentTarget(ctx, id)
	if err != nil {
		return nil, err
	}
	names, err := s.lent.Lent.Register(originOf(ctx), id, defs, s.tools.Unlent(ctx, info))
	if err != nil {
		return nil, err
	}
	return &trellisv1.RegisterToolsResponse{Names: names}, nil
}

// lentTarget checks the session tools are lent to (none: the daemon's
// tools stand for what its sessions have) and returns what the tool list
// needs of it.
func (s *ToolServer) lentTarget(ctx context.Context, id string) (session.Info, error) {
	if id == "" {
		return session.Info{}, nil
	}
	sum, err := s.sessions.Get(ctx, id)
	if err != nil {
		return session.Info{}, err
	}
	if s.lent.Owners != nil {
		var other *cluster.NotOwnerError
		if err := s.lent.Owners.Acquire(ctx, id); errors.As(err, &other) {
			return session.Info{}, errs.NewUnsupported("sessionId", id,
				"session %s is served by daemon %s (%s) of the cluster: tools are lent only to sessions of the daemon the connection is on; connect to that daemon and call tool.register there", id, other.Owner, other.Addr).
				WithData("owner", other.Owner)
		} else if err != nil {
			return session.Info{}, err
		}
	}
	r := sum.Row
	return session.Info{SessionID: r.SessionID, Workdir: r.Workdir, Mode: r.Mode, Kind: r.Kind, JobID: r.JobID, Agent: r.Agent, Backend: r.Backend,
		Origin: s.sessions.Origin(id)}, nil
}

// UnregisterTools takes back tools the caller's connection lent.
func (s *ToolServer) UnregisterTools(ctx context.Context, req *trellisv1.UnregisterToolsRequest) (*trellisv1.UnregisterToolsResponse, error) {
	if id := req.GetSessionId(); id != "" {
		if _, err := s.sessions.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	removed := []string{}
	if s.lent.Lent != nil {
		removed = append(removed, s.lent.Lent.Unregister(originOf(ctx), req.GetSessionId(), req.GetNames())...)
	}
	return &trellisv1.UnregisterToolsResponse{Removed: removed}, nil
}

// ServeLentTools carries the calls of one origin's lent tools to its
// client and their answers back; its end unregisters the origin's tools.
func (s *ToolServer) ServeLentTools(stream grpc.BidiStreamingServer[trellisv1.ServeLentToolsRequest, trellisv1.ServeLentToolsResponse]) error {
	if s.lent.Lent == nil {
		return errs.NewUnsupported("method", "ServeLentTools", "this daemon does not take lent tools")
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return errs.New(errcode.InvalidParams, "the ServeLentTools stream closed before its start message")
	}
	if err != nil {
		return err
	}
	origin := strings.TrimSpace(first.GetStart().GetOriginId())
	if origin == "" {
		return errs.New(errcode.InvalidParams, "the first ServeLentTools message must be start{originId}")
	}
	ls := &lentStream{s: s, stream: stream, pending: map[string]chan lentAnswer{}, done: make(chan struct{})}
	detach := s.lent.Lent.Attach(origin, ls.call)
	defer detach()
	defer close(ls.done)
	if err := ls.send(&trellisv1.ServeLentToolsResponse{Msg: &trellisv1.ServeLentToolsResponse_Ready{Ready: &trellisv1.LentToolsStart{OriginId: origin}}}); err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r := msg.GetResult(); r != nil {
			ls.deliver(r)
		}
	}
}

// lentAnswer is a lender's answer to one call, or why there is none.
type lentAnswer struct {
	reply tool.LentReply
	err   error
}

// lentStream is one ServeLentTools stream: the calls sent on it that wait
// for their answer, by call id.
type lentStream struct {
	s      *ToolServer
	stream grpc.BidiStreamingServer[trellisv1.ServeLentToolsRequest, trellisv1.ServeLentToolsResponse]
	sendMu sync.Mutex
	done   chan struct{} // closed when the stream ended

	mu      sync.Mutex
	pending map[string]chan lentAnswer
}

func (ls *lentStream) send(m *trellisv1.ServeLentToolsResponse) error {
	ls.sendMu.Lock()
	defer ls.sendMu.Unlock()
	return ls.stream.Send(m)
}

// call implements tool.Lender.
func (ls *lentStream) call(ctx context.Context, c tool.LentCall) (tool.LentReply, error) {
	args := map[string]any{}
	if len(c.Args) > 0 {
		if err := json.Unmarshal(c.Args, &args); err != nil {
			return tool.LentReply{}, err
		}
	}
	st, err := structpb.NewStruct(args)
	if err != nil {
		return tool.LentReply{}, err
	}
	ch := make(chan lentAnswer, 1)
	ls.mu.Lock()
	if _, dup := ls.pending[c.CallID]; dup {
		ls.mu.Unlock()
		return tool.LentReply{}, errors.New("another call with the same call id is waiting for this client's answer")
	}
	ls.pending[c.CallID] = ch
	ls.mu.Unlock()
	defer func() {
		ls.mu.Lock()
		delete(ls.pending, c.CallID)
		ls.mu.Unlock()
	}()
	var after int64
	if ls.s.lent.LastSeq != nil && c.SessionID != "" {
		after, _ = ls.s.lent.LastSeq(ctx, c.SessionID)
	}
	msg := &trellisv1.ServeLentToolsResponse{AfterSeq: after, Msg: &trellisv1.ServeLentToolsResponse_Call{Call: &trellisv1.ToolCallRequest{
		SessionId: c.SessionID, TurnId: c.TurnID, CallId: c.CallID, Name: c.Name, Arguments: st}}}
	if err := ls.send(msg); err != nil {
		return tool.LentReply{}, errors.New("the client that lent the tool is gone (its connection closed)")
	}
	select {
	case a := <-ch:
		return a.reply, a.err
	case <-ls.done:
		return tool.LentReply{}, errors.New("the client that lent the tool disconnected before it answered")
	case <-ctx.Done():
		_ = ls.send(&trellisv1.ServeLentToolsResponse{Msg: &trellisv1.ServeLentToolsResponse_Cancel{Cancel: &trellisv1.LentToolCancel{CallId: c.CallID}}})
		return tool.LentReply{}, ctx.Err()
	}
}

// deliver hands a result to the call waiting for it (a late one, whose
// call ended, is dropped).
func (ls *lentStream) deliver(r *trellisv1.LentToolResult) {
	ls.mu.Lock()
	ch := ls.pending[r.GetCallId()]
	ls.mu.Unlock()
	if ch == nil {
		return
	}
	var a lentAnswer
	switch {
	case r.Error != nil:
		a.err = errors.New(r.GetError())
	default:
		out := r.GetReply().GetOutput()
		if out == "" {
			out = r.GetReply().GetContent()
		}
		a.reply = tool.LentReply{Output: out, IsError: r.GetReply().GetIsError()}
	}
	select {
	case ch <- a:
	default:
	}
}
