package facade

import (
	"context"
	"reflect"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/telemetry"
)

// maxWatchBacklog bounds the watch notifications waiting for a connection
// whose write queue is full; past it the connection is closed (its client
// has not read for that long) rather than silently missing one.
const maxWatchBacklog = 4096

// startWatches starts, once, the facade's one stream per notification
// family (approval queue, jobs, gateway, commands), each fanned out to
// every authenticated connection.
func (s *Server) startWatches() {
	s.watchOnce.Do(func() {
		cc := s.opts.Conn
		const families = 5
		ready := make(chan struct{}, families)
		go watchFamily(s, ready, "approval queue", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchQueueResponse], error) {
			return trellisv1.NewApprovalServiceClient(cc).WatchQueue(ctx, &trellisv1.WatchQueueRequest{})
		}, func(r *trellisv1.WatchQueueResponse) (string, proto.Message) {
			if p := r.GetPending(); p != nil {
				return "approval.pending", p
			}
			return "approval.resolved", r.GetResolved()
		})
		go watchFamily(s, ready, "gateway event", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.GatewayServiceWatchResponse], error) {
			return trellisv1.NewGatewayServiceClient(cc).Watch(ctx, &trellisv1.GatewayServiceWatchRequest{})
		}, func(r *trellisv1.GatewayServiceWatchResponse) (string, proto.Message) {
			return "gateway.event", r.GetEvent()
		})
		go watchFamily(s, ready, "job event", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.JobServiceWatchResponse], error) {
			return trellisv1.NewJobServiceClient(cc).Watch(ctx, &trellisv1.JobServiceWatchRequest{})
		}, func(r *trellisv1.JobServiceWatchResponse) (string, proto.Message) {
			return "job.event", r.GetEvent()
		})
		go watchFamily(s, ready, "commands", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchCommandsResponse], error) {
			return trellisv1.NewSkillServiceClient(cc).WatchCommands(ctx, &trellisv1.WatchCommandsRequest{})
		}, func(r *trellisv1.WatchCommandsResponse) (string, proto.Message) {
			return "commands.changed", r.GetChanged()
		})
		go watchFamily(s, ready, "MCP servers", func(ctx context.Context) (grpc.ServerStreamingClient[trellisv1.WatchMcpServersResponse], error) {
			return trellisv1.NewToolServiceClient(cc).WatchMcpServers(ctx, &trellisv1.WatchMcpServersRequest{})
		}, func(r *trellisv1.WatchMcpServersResponse) (string, proto.Message) {
			return "mcp.changed", r.GetChanged()
		})
		// The first hello waits (bounded) until every family's stream is
		// registered with the runtime, so that nothing emitted after that
		// hello's answer can miss its connection. Later hellos find the
		// streams open (sync.Once makes concurrent ones wait too).
		timer := time.NewTimer(watchReadyTimeout)
		defer timer.Stop()
		for range families {
			select {
			case <-ready:
			case <-timer.C:
				s.opts.Log.Warn("notification streams not open yet; going on without waiting", "after", watchReadyTimeout)
				return
			case <-s.ctx.Done():
				return
			}
		}
	})
}

// watchReadyTimeout bounds how long the first hello waits for the watch
// streams to open.
const watchReadyTimeout = 5 * time.Second

// watchFamily keeps one runtime watch stream open for the facade's life
// (reopening it after a failure) and sends each of its messages, rendered
// once, to every authenticated connection.
func watchFamily[T any](s *Server, ready chan<- struct{}, what string, open func(context.Context) (grpc.ServerStreamingClient[T], error), notification func(*T) (string, proto.Message)) {
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			ready <- struct{}{}
		}
	}
	defer signal()
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		stream, err := open(s.ctx)
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
			method, params := notification(resp)
			if params == nil || reflect.ValueOf(params).IsNil() {
				continue
			}
			s.broadcast(jsonrpc.NotificationFrame(method, codec.Marshal(params)))
		}
		if status.Code(err) == codes.Unimplemented {
			s.opts.Log.Debug(what + " notifications are not served by this runtime")
			return
		}
		if s.ctx.Err() != nil {
			return
		}
		s.opts.Log.Warn(what+" stream ended; reopening", "err", err)
		select {
		case <-time.After(backoff):
		case <-s.ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// broadcast offers a frame to every authenticated connection.
func (s *Server) broadcast(frame []byte) {
	s.mu.Lock()
	conns := make([]*wsConn, 0, len(s.conns))
	for c := range s.conns {
		if c.authenticated() {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.deliver(frame)
	}
}

// deliver queues a watch notification without blocking the family's
// stream: when the connection's queue is full the frame waits in its
// backlog, which one goroutine drains in order.
func (c *wsConn) deliver(frame []byte) {
	c.backlogMu.Lock()
	defer c.backlogMu.Unlock()
	if !c.draining && c.rpc.TrySend(frame) {
		return
	}
	if len(c.backlog) >= maxWatchBacklog {
		telemetry.SlowClient("closed")
		c.log.Warn("closing a connection that reads nothing: its notification backlog is full", "frames", len(c.backlog))
		go c.rpc.Close()
		return
	}
	c.backlog = append(c.backlog, frame)
	if !c.draining {
		c.draining = true
		go c.drainBacklog()
	}
}

func (c *wsConn) drainBacklog() {
	for {
		c.backlogMu.Lock()
		if len(c.backlog) == 0 {
			c.backlog, c.draining = nil, false
			c.backlogMu.Unlock()
			return
		}
		frame := c.backlog[0]
		c.backlogMu.Unlock()
		if c.rpc.SendFrame(c.rpc.Context(), frame) != nil {
			c.backlogMu.Lock()
			c.backlog = nil // the connection closed; draining stays set
			c.backlogMu.Unlock()
			return
		}
		c.backlogMu.Lock()
		c.backlog = c.backlog[1:]
		c.backlogMu.Unlock()
	}
}
