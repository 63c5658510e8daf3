package instrument

import (
	"context"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/trellis-run/trellis/telemetry"
)

// requestID is the caller's request id (the facade sends one per client
// call), or a new one for a direct gRPC caller.
func requestID(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(telemetry.MDRequestID); len(v) > 0 && v[0] != "" && len(v[0]) <= 64 {
			return telemetry.WithRequestID(ctx, v[0])
		}
	}
	return telemetry.WithRequestID(ctx, telemetry.NewRequestID())
}

// RequestIDUnary puts the call's request id into its context (log lines).
func RequestIDUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(requestID(ctx), req)
}

// RequestIDStream is RequestIDUnary for streams.
func RequestIDStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	w := middleware.WrapServerStream(ss) // go-grpc-middleware's context-carrying wrapper
	w.WrappedContext = requestID(ss.Context())
	return h(srv, w)
}

// Without a client stats handler (the facade's connection is in process),
// the trace context still reaches the runtime, tracing on or off, so that
// spans and the ids in log lines follow a client's traceparent from the
// facade into the runtime: PropagatingConn carries it, and costs nothing
// when there is none.

// PropagatingConn sends the trace context of each call's context along as
// traceparent metadata over cc (a connection without interceptors of its
// own, such as the daemon's in-process one).
func PropagatingConn(cc grpc.ClientConnInterface) grpc.ClientConnInterface {
	return propagatingConn{cc}
}

type propagatingConn struct{ cc grpc.ClientConnInterface }

func (p propagatingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return p.cc.Invoke(inject(ctx), method, args, reply, opts...)
}

func (p propagatingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return p.cc.NewStream(inject(ctx), desc, method, opts...)
}

// PropagateUnary reads a caller's traceparent metadata into the context.
func PropagateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(extract(ctx), req)
}

// PropagateStream is PropagateUnary for streams.
func PropagateStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx := extract(ss.Context())
	if ctx == ss.Context() {
		return h(srv, ss)
	}
	w := middleware.WrapServerStream(ss)
	w.WrappedContext = ctx
	return h(srv, w)
}

func inject(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	if tp := telemetry.Traceparent(ctx); tp != "" {
		return metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
	}
	return ctx
}

func extract(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	tp := md.Get("traceparent")
	if len(tp) == 0 {
		return ctx
	}
	var ts string
	if v := md.Get("tracestate"); len(v) > 0 {
		ts = v[0]
	}
	return telemetry.WithTraceparent(ctx, tp[0], ts)
}
