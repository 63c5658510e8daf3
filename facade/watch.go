package facade

import (
	"context"
	"reflect"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/facade/methods"
	"github.com/trellis-run/trellis/facade/rest"
	"github.com/trellis-run/trellis/internal/broadcast"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/telemetry"
)

// maxWatchBacklog bounds the watch notifications waiting for a connection
// whose write queue is full (the one being written included); past it the
// connection is closed (its client has not read for that long) rather than
// silently missing one.
const maxWatchBacklog = 4096

// audience is the notification streams of one kind of caller: the daemon
// token's (key "", every notification) or one API key's, opened on behalf
// of the key so that the runtime sends only what its principal may see
// (the approvals of sessions it may read; no job or gateway events below
// operator). The connections that said hello with the same key share it;
// a key's audience closes with its last connection.
type audience struct {
	key    string
	ctx    context.Context
	cancel context.CancelFunc
	users  int
	ready  chan struct{} // closed once every family's stream is registered (or failed)
}

// notificationFamilies is how many streams an audience opens.
const notificationFamilies = 6

// joinWatches adds c to the audience of its key, opening that audience's
// streams when c is the first; the first hello waits (bounded) until they
// are registered with the runtime, so that nothing emitted after its
// answer can miss the connection. c's close leaves the audience.
func (s *Server) joinWatches(c *wsConn) {
	s.watchMu.Lock()
	a := s.audiences[c.key]
	if a == nil {
		a = s.openAudience(c.key)
		s.audiences[c.key] = a
	}
	a.users++
	s.watchMu.Unlock()
	c.rpc.OnClose(func() { s.leaveWatches(a) })
	timer := time.NewTimer(watchReadyTimeout)
	defer timer.Stop()
	select {
	case <-a.ready:
	case <-timer.C:
		s.opts.Log.Warn("notification streams not open yet; going on without waiting", "after", watchReadyTimeout)
	case <-s.ctx.Done():
	}
}

// leaveWatches counts a closed connection out of a; a key's audience
// closes its streams with its last connection (the token's stays open).
func (s *Server) leaveWatches(a *audience) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if a.users--; a.users == 0 && a.key != "" {
		a.cancel()
		delete(s.audiences, a.key)
	}
}

// openAudience starts the streams of one audience, one per notification
// family (approval queue, jobs, gateway, commands, MCP servers, settings).
func (s *Server) openAudience(key string) *audience {
	ctx, cancel := context.WithCancel(s.ctx)
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, rest.MDOnBehalfOf, key)
	}
	a := &audience{key: key, ctx: ctx, cancel: cancel, ready: make(chan struct{})}
	cc := s.opts.Conn
	registered := make(chan struct{}, notificationFamilies)
	go watchFamily(s, a, registered, "approval queue", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchQueueResponse], error) {
		return trellisv1.NewApprovalServiceClient(cc).WatchQueue(ctx, &trellisv1.WatchQueueRequest{})
	}, func(r *trellisv1.WatchQueueResponse) proto.Message {
		switch m := r.GetMsg().(type) {
		case *trellisv1.WatchQueueResponse_Pending:
			return m.Pending
		case *trellisv1.WatchQueueResponse_QuestionPending:
			return m.QuestionPending
		case *trellisv1.WatchQueueResponse_QuestionResolved:
			return m.QuestionResolved
		}
		return r.GetResolved()
	})
	go watchFamily(s, a, registered, "gateway event", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.GatewayServiceWatchResponse], error) {
		return trellisv1.NewGatewayServiceClient(cc).Watch(ctx, &trellisv1.GatewayServiceWatchRequest{})
	}, func(r *trellisv1.GatewayServiceWatchResponse) proto.Message { return r.GetEvent() })
	go watchFamily(s, a, registered, "job event", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.JobServiceWatchResponse], error) {
		return trellisv1.NewJobServiceClient(cc).Watch(ctx, &trellisv1.JobServiceWatchRequest{})
	}, func(r *trellisv1.JobServiceWatchResponse) proto.Message { return r.GetEvent() })
	go watchFamily(s, a, registered, "commands", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchCommandsResponse], error) {
		return trellisv1.NewSkillServiceClient(cc).WatchCommands(ctx, &trellisv1.WatchCommandsRequest{})
	}, func(r *trellisv1.WatchCommandsResponse) proto.Message { return r.GetChanged() })
	go watchFamily(s, a, registered, "MCP servers", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchMcpServersResponse], error) {
		return trellisv1.NewToolServiceClient(cc).WatchMcpServers(ctx, &trellisv1.WatchMcpServersRequest{})
	}, func(r *trellisv1.WatchMcpServersResponse) proto.Message { return r.GetChanged() })
	go watchFamily(s, a, registered, "settings", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchSettingsResponse], error) {
		return trellisv1.NewSystemServiceClient(cc).WatchSettings(ctx, &trellisv1.WatchSettingsRequest{})
	}, func(r *trellisv1.WatchSettingsResponse) proto.Message { return r.GetChanged() })
	go func() {
		for range notificationFamilies {
			select {
			case <-registered:
			case <-ctx.Done():
				return
			}
		}
		close(a.ready)
	}()
	return a
}

// watchReadyTimeout bounds how long the first hello waits for the watch
// streams to open.
const watchReadyTimeout = 5 * time.Second

// watchFamily keeps one runtime watch stream of audience a open while a
// is (reopening it after a failure) and sends each of its messages' params,
// rendered once as the notification their message names, to every
// authenticated connection of a. A family the
// audience's principal may not watch (forbidden by its role) ends quietly.
func watchFamily[T any](s *Server, a *audience, ready chan<- struct{}, what string, open func(context.Context) (grpc.ServerStreamingClient[T], error), params func(*T) proto.Message) {
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			ready <- struct{}{}
		}
	}
	defer signal()
	backoff := 100 * time.Millisecond
	for a.ctx.Err() == nil {
		stream, err := open(a.ctx)
		if err == nil {
			// The runtime sends the headers once its watcher is registered.
			_, err = stream.Header()
		}
		signal() // registered, or failed: the first hello does not wait for a retry
		for err == nil {
			var resp *T
			if resp, err = stream.Recv(); err != nil {
				break
			}
			backoff = 100 * time.Millisecond
			p := params(resp)
			if p == nil || reflect.ValueOf(p).IsNil() {
				continue
			}
			s.broadcast(a, jsonrpc.NotificationFrame(methods.NotificationOf(p), codec.Marshal(p)))
		}
		switch status.Code(err) {
		case codes.Unimplemented:
			s.opts.Log.Debug(what + " notifications are not served by this runtime")
			return
		case codes.PermissionDenied, codes.Unauthenticated:
			// Below the family's least role, or the key was revoked: its
			// connections close on their next call.
			s.opts.Log.Debug(what+" notifications are not for this key", "err", err)
			return
		}
		if a.ctx.Err() != nil {
			return
		}
		s.opts.Log.Warn(what+" stream ended; reopening", "err", err)
		select {
		case <-time.After(backoff):
		case <-a.ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// broadcast offers a frame to every authenticated connection of a.
func (s *Server) broadcast(a *audience, frame []byte) {
	s.mu.Lock()
	conns := make([]*wsConn, 0, len(s.conns))
	for c := range s.conns {
		if c.authenticated() && c.key == a.key {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.deliver(frame)
	}
}

// newNotes returns c's queue of watch notifications: a frame goes to the
// write queue at once when it has room and nothing waits before it, else
// it waits its turn, delivered in order by a goroutine while any wait; past
// maxWatchBacklog waiting, deliver closes the connection.
func newNotes(c *wsConn) *broadcast.Queue[[]byte] {
	return broadcast.NewSink(broadcast.Policy[[]byte]{Limit: maxWatchBacklog, Overflow: broadcast.RefuseValue},
		c.rpc.TrySend,
		func(frame []byte) bool { return c.rpc.SendFrame(c.rpc.Context(), frame) == nil })
}

// deliver queues a watch notification without blocking the family's
// stream; a connection whose backlog is full is closed (its client has not
// read for that long) rather than silently missing one.
func (c *wsConn) deliver(frame []byte) {
	if c.notes.Push(frame) {
		telemetry.SlowClient("closed")
		c.log.Warn("closing a connection that reads nothing: its notification backlog is full", "frames", maxWatchBacklog)
		c.notes.Stop(nil)
		go c.rpc.Close()
	}
}
