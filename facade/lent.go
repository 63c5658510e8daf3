package facade

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

type lentStream = grpc.BidiStreamingClient[trellisv1.ServeLentToolsRequest, trellisv1.ServeLentToolsResponse]

// lender is a connection's ServeLentTools stream: opened by its first
// tool.register, it carries the calls of the tools the connection lent
// (each put to the client as a tool.call request) and their answers, and
// ends with the connection, which unregisters its tools. A stream that
// fails while the connection lives is opened again by the next
// tool.register (the runtime dropped the tools lent on it).
type lender struct {
	mu     sync.Mutex
	stream lentStream
	cancel context.CancelFunc
	calls  map[string]context.CancelFunc // call id → its tool.call request's cancel
	sendMu sync.Mutex
}

// ensureLender opens the connection's lending stream if it has none; the
// runtime's answer to tool.register says what is wrong if it cannot be
// opened (a runtime without lent tools answers unsupported).
func (c *wsConn) ensureLender(ctx context.Context) *jsonrpc.Error {
	l := &c.lender
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stream != nil {
		return nil
	}
	sctx, cancel := context.WithCancel(c.rpc.Context())
	stream, err := trellisv1.NewToolServiceClient(c.s.opts.Conn).ServeLentTools(c.outgoing(sctx))
	if err == nil {
		err = stream.Send(&trellisv1.ServeLentToolsRequest{Msg: &trellisv1.ServeLentToolsRequest_Start{Start: &trellisv1.LentToolsStart{OriginId: c.id}}})
	}
	var first *trellisv1.ServeLentToolsResponse
	if err == nil || errors.Is(err, io.EOF) {
		// io.EOF from Send: the runtime ended the stream first (it refused
		// it); Recv says how.
		first, err = stream.Recv()
	}
	if err != nil {
		cancel()
		if status.Code(err) == codes.Unimplemented {
			return nil
		}
		return c.s.mapper.FromError(ctx, err)
	}
	_ = first // ready
	l.stream, l.cancel, l.calls = stream, cancel, map[string]context.CancelFunc{}
	go c.serveLent(sctx, stream)
	return nil
}

// serveLent reads the lending stream: each call goes to the client as a
// tool.call request in a goroutine of its own, a cancel withdraws one.
func (c *wsConn) serveLent(ctx context.Context, stream lentStream) {
	l := &c.lender
	defer func() {
		l.mu.Lock()
		if l.stream == stream {
			l.cancel()
			l.stream = nil
			for _, cancel := range l.calls {
				cancel()
			}
			l.calls = nil
		}
		l.mu.Unlock()
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("the stream of this connection's lent tools ended; tool.register opens it again", "err", err)
			}
			return
		}
		switch {
		case resp.GetCall() != nil:
			call := resp.GetCall()
			callCtx, cancel := context.WithCancel(ctx)
			l.mu.Lock()
			if l.calls != nil {
				l.calls[call.GetCallId()] = cancel
			}
			l.mu.Unlock()
			go c.lentCall(callCtx, cancel, stream, call, resp.GetAfterSeq())
		case resp.GetCancel() != nil:
			l.mu.Lock()
			if cancel := l.calls[resp.GetCancel().GetCallId()]; cancel != nil {
				cancel()
			}
			l.mu.Unlock()
		}
	}
}

// lentCall puts one call to the client after the session's events up to
// afterSeq, and sends its answer back.
func (c *wsConn) lentCall(ctx context.Context, cancel context.CancelFunc, stream lentStream, call *trellisv1.ToolCallRequest, afterSeq int64) {
	l := &c.lender
	defer func() {
		cancel()
		l.mu.Lock()
		delete(l.calls, call.GetCallId())
		l.mu.Unlock()
	}()
	c.awaitEvents(ctx, call.GetSessionId(), afterSeq)
	res := &trellisv1.LentToolResult{CallId: call.GetCallId()}
	reply := &trellisv1.ToolCallReply{}
	if why := c.request(ctx, "tool.call", call, reply); why != "" {
		res.Error = &why
	} else {
		res.Reply = reply
	}
	if ctx.Err() != nil {
		return // withdrawn, or the connection closed
	}
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	if err := stream.Send(&trellisv1.ServeLentToolsRequest{Msg: &trellisv1.ServeLentToolsRequest_Result{Result: res}}); err != nil {
		c.log.Debug("a lent tool's answer could not be sent", "callId", call.GetCallId(), "err", err)
	}
}
